// This host's addresses: the loopback recognised in every spelling, interfaces looked up by name,
// and the source address towards the loopback.
#include "launch/host_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace fsdp::launch {
namespace {

bool is_ipv4(const std::string& text) {
  in_addr a{};
  return ::inet_pton(AF_INET, text.c_str(), &a) == 1;
}

TEST(HostAddress, LoopbackInEverySpelling) {
  for (const char* host : {"localhost", "::1", "127.0.0.1", "127.1.2.3"}) EXPECT_TRUE(is_loopback(host)) << host;
  for (const char* host : {"", "0.0.0.0", "10.0.0.7", "::", "128.0.0.1", "localhost.example", "1.127.0.0"})
    EXPECT_FALSE(is_loopback(host)) << host;
}

TEST(HostAddress, InterfaceByName) {
  EXPECT_EQ(interface_address("no-such-interface0"), "");
  EXPECT_EQ(interface_address(""), "");
  const std::string lo = interface_address("lo");
  if (lo.empty()) GTEST_SKIP() << "no IPv4 loopback interface named lo here";
  EXPECT_TRUE(is_loopback(lo)) << lo;
}

TEST(HostAddress, FirstExternalAddressIsNeverTheLoopback) {
  const std::string a = first_external_address();
  if (a.empty()) GTEST_SKIP() << "no interface up beside the loopback";
  EXPECT_TRUE(is_ipv4(a)) << a;
  EXPECT_FALSE(is_loopback(a)) << a;
}

TEST(HostAddress, SourceTowardsTheLoopbackIsTheLoopback) {
  EXPECT_EQ(source_address_towards("127.0.0.1", 9), "127.0.0.1");
  EXPECT_EQ(source_address_towards("no-such-host.invalid", 9), "");
}

}  // namespace
}  // namespace fsdp::launch
