// A job's random id: 16 lowercase hex digits, drawn so that two jobs (or two communicators of one
// process) never share one. It names a job's shared-memory segment and the NCCL API's store keys.
#pragma once

#include <string>

namespace fsdp::launch {

std::string random_job_id();

}  // namespace fsdp::launch
