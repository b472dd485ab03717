#include "launch/host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>

namespace fsdp::launch {
namespace {

// The IPv4 address of the first interface `wanted` accepts, or "".
std::string first_ipv4_where(const std::function<bool(const ifaddrs&)>& wanted) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string found;
  for (ifaddrs* a = all; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !wanted(*a)) continue;
    char text[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text))) found = text;
  }
  ::freeifaddrs(all);
  return found;
}

}  // namespace

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

std::string interface_address(const std::string& name) {
  return first_ipv4_where([&](const ifaddrs& a) { return name == a.ifa_name; });
}

std::string first_external_address() {
  return first_ipv4_where([](const ifaddrs& a) { return (a.ifa_flags & IFF_UP) && !(a.ifa_flags & IFF_LOOPBACK); });
}

std::string source_address_towards(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return "";
  std::string result;
  for (addrinfo* a = found; a && result.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr = local.ss_family == AF_INET6
                             ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, text, sizeof(text))) result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return result;
}

}  // namespace fsdp::launch
