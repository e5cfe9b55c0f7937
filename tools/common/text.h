// How every output of the CLI writes the same small things: bytes, rank lists, versions, signals.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace p2ptrace::cli {

// "4.0 MiB", "512 B": a byte count as the report prints it.
std::string BytesText(uint64_t bytes);
// "0-7, 9, 12-15" for sorted ranks; "" for none.
std::string RankRanges(const std::vector<int>& sorted);
// "13.0" for CUDA's version code 13000; "?" for 0.
std::string CudaVersionText(int code);
// "2.28.9" for NCCL_VERSION_CODE 22809 (and 2.8.4 for the old 2804 form); "" for 0.
std::string NcclVersionText(int code);
// "SIGSEGV" for 11 (the kernel's name for it), "signal 99" for a number without one.
std::string SignalName(int signal);

}  // namespace p2ptrace::cli
