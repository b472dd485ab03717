// Uses the installed C++ headers and static libraries: two in-process ranks all-reduce through
// Communicator, and the launch layer reads "who am I" from the environment. Prints "consumer_cpp OK".
#include <cstdio>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/transports/inproc.h"
#include "launch/bootstrap.h"

int main() {
  auto transports = fsdp::make_inproc_transports(2);
  auto a = fsdp::Communicator::create(transports[0]);
  auto b = fsdp::Communicator::create(transports[1]);
  std::vector<float> x{1, 2}, y{10, 20};
  fsdp::Work wa = a->all_reduce(x.data(), x.data(), 2, fsdp::DataType::kFloat32, fsdp::ReduceOp::sum());
  fsdp::Work wb = b->all_reduce(y.data(), y.data(), 2, fsdp::DataType::kFloat32, fsdp::ReduceOp::sum());
  wa.wait();
  wb.wait();
  if (x[0] != 11 || x[1] != 22 || y != x) {
    std::fprintf(stderr, "all-reduce gave %g %g\n", x[0], x[1]);
    return 1;
  }
  const fsdp::launch::ProcessEnv env = fsdp::launch::detect_process_env();
  std::printf("consumer_cpp OK (rank %d of %d from %s)\n", env.rank, env.world_size, env.source.c_str());
  return 0;
}
