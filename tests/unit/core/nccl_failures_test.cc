// core/nccl_failures: NCCL's WARN lines and failed return codes → causes of the catalog. Every
// message below is one of NCCL's WARN format strings (file of 2.28.9 beside it) filled in as NCCL
// fills it, or a CUDA error string NCCL quotes; each classified cause must exist in the catalog.
#include "core/nccl_failures.h"

#include <gtest/gtest.h>

#include <string>

#include "core/causes.h"
#include "core/nccl_log.h"

namespace {

using p2ptrace::ClassifyNcclResult;
using p2ptrace::ClassifyNcclWarning;
using p2ptrace::DiagnoseNcclFailures;
using p2ptrace::FindCause;
using p2ptrace::ParseNcclLog;

std::string CauseOf(const std::string& message) {
  auto c = ClassifyNcclWarning(message);
  if (!c) return "";
  EXPECT_NE(FindCause(c->cause), nullptr) << c->cause << " is not in the catalog";
  EXPECT_FALSE(c->meaning.empty());
  return std::string(c->cause);
}

TEST(NcclFailures, WarnLinesOfNcclsSource) {
  struct Case {
    std::string message, cause;
  } cases[] = {
      // misc/shmutils.cc, strerror(ENOSPC) = "No space left on device"
      {"Error: failed to extend /dev/shm/nccl-kQ3b9x to 9637892 bytes, error: No space left on device (28)", "shm-too-small"},
      {"Error while creating shared memory segment /dev/shm/nccl-kQ3b9x (size 9633792), error: No space left on device (28)",
       "shm-too-small"},
      {"Error: failed to create shared memory file /dev/shm/nccl-abc, error Permission denied (13)", "shm-failed"},
      {"Error: Could not map /dev/shm/nccl-abc size 9637892, error: Invalid argument (22)", "shm-failed"},
      // include/checks.h CUDACHECK with cudaGetErrorString
      {"Cuda failure 'peer mapping resources exhausted'", "peer-mapping-exhausted"},
      {"Cuda failure 'out of memory'", "gpu-out-of-memory"},
      {"Cuda failure 'no CUDA-capable device is detected'", "no-gpu-visible"},
      {"Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'", "cuda-driver-too-old"},
      {"Cuda failure 'an illegal memory access was encountered'", "cuda-error"},
      // transport/p2p.cc
      {"failed to peer with device 9(=9b000): 711 peer mapping resources exhausted", "peer-mapping-exhausted"},
      {"failed to peer with device 1(=1b000): 217 peer access is not supported between these two devices",
       "cuda-peer-enable-failed"},
      // graph/paths.cc (fatal NVML check)
      {"P2P is disabled between NVLINK connected GPUs 0 and 1. This should not be the case given their connectivity, "
       "and is probably due to a hardware issue. If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.",
       "nvml-p2p-status"},
      // init.cc
      {"Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000", "duplicate-gpu"},
      {"Mismatched NCCL version detected : rank 0 version 22809 rank 1 version 22105", "rank-mismatch"},
      {"Invalid rank requested : 4/4", "nccl-invalid-usage"},
      {"Invalid config blocking attribute value -5", "nccl-invalid-usage"},
      // bootstrap.cc, misc/socket.cc, transport/net_socket.cc
      {"Bootstrap : no socket interface found", "socket-interface-not-found"},
      {"NET/Socket : no interface found", "socket-interface-not-found"},
      {"no device found matching eth9, verify NCCL_OOB_NET_IFNAME", "socket-interface-not-found"},
      {"socketStartConnect: connect to 10.0.0.2<44827> failed : Connection refused", "bootstrap-connect-failed"},
      {"socketPollConnect: connect to 10.0.0.2<44827> returned Connection timed out, exceeded error retry count after 35 "
       "attempts",
       "bootstrap-connect-failed"},
      {"socketProgress: Connection closed by remote peer node1<51320>", "peer-process-failed"},
      {"Net : error encountered when getting address info : Name or service not known", "bootstrap-connect-failed"},
      {"ncclOsSocketTryAccept: exceeded error retry count after 35 attempts, Connection reset by peer",  // 2.30.7 os/linux.cc
       "bootstrap-connect-failed"},
      {"Message truncated : received 256 bytes instead of 128", "rank-mismatch"},
      // transport/net_ib.cc, misc/ibvwrap.cc
      {"NET/IB: Got completion from peer 10.0.0.2<41234> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) "
       "reqSize=0 vendor_err=129 req_type=Send localGid ::ffff:10.0.0.1 remoteGids ::ffff:10.0.0.2 hca mlx5_0",
       "ib-error"},
      {"NET/IB : mlx5_0:1 async fatal event: local catastrophic error", "ib-error"},
      {"Call to ibv_reg_mr failed with error Cannot allocate memory", "ib-memlock"},
      // transport.cc
      {"Rank 0 has no transport for send peer 1 on channel 0/0", "no-transport"},
      // misc/cudawrap.cc, misc/nvmlwrap.cc, include/alloc.h
      {"CUDA Driver version found is 11040. Minimum requirement is 12000", "cuda-driver-too-old"},
      {"Failed to open libnvidia-ml.so.1", "nvml-unavailable"},
      {"Failed to CUDA calloc 4194304 bytes", "gpu-out-of-memory"},
      // include/checks.h SYSCHECK
      {"Call to posix_fallocate failed: No space left on device", "shm-too-small"},
      {"Call to accept failed: Too many open files", "nccl-system-error"},
  };
  for (const Case& c : cases) EXPECT_EQ(CauseOf(c.message), c.cause) << c.message;
}

TEST(NcclFailures, WarningsThatAreNotFailuresStayUnclassified) {
  for (const char* m : {"NCCL_WORK_FIFO_BYTES=3 is being ignored because it is not a power of 2.",
                        "Ignoring SHM locality, must be 1 (sender side) or 2 (receiver side, default)", "bad socket", ""})
    EXPECT_EQ(CauseOf(m), "") << m;
}

TEST(NcclFailures, ReturnCodes) {
  EXPECT_EQ(p2ptrace::NcclResultName(2), "ncclSystemError");
  EXPECT_EQ(p2ptrace::NcclResultName(42), "");
  EXPECT_FALSE(ClassifyNcclResult(0));
  EXPECT_FALSE(ClassifyNcclResult(7));  // ncclInProgress
  for (int code = 1; code <= 6; ++code) {
    auto c = ClassifyNcclResult(code);
    ASSERT_TRUE(c) << code;
    EXPECT_NE(FindCause(c->cause), nullptr) << c->cause;
  }
  EXPECT_EQ(ClassifyNcclResult(6)->cause, "peer-process-failed");
}

// The case: an allreduce failed on a full /dev/shm; the log holds NCCL 2.28's two WARN lines
// (each after NCCL's empty line), the NCCLCHECK trail, and PyTorch's error line.
TEST(NcclFailures, AFullDevShmInALogIsOneFindingWithItsLines) {
  const char* text =
      "node0:4711:4711 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init START\n"
      "\n"
      "[2026-12-03 10:00:00] node0:4711:4720 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-kQ3b9x "
      "to 9637892 bytes, error: No space left on device (28)\n"
      "\n"
      "[2026-12-03 10:00:00] node0:4711:4720 [0] misc/shmutils.cc:135 NCCL WARN Error while creating shared memory segment "
      "/dev/shm/nccl-kQ3b9x (size 9633792), error: No space left on device (28)\n"
      "node0:4711:4720 [0] NCCL INFO transport/shm.cc:114 -> 2\n"
      "node0:4711:4720 [0] NCCL INFO transport.cc:197 -> 2\n"
      "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for "
      "details), NCCL version 2.28.9\n";
  p2ptrace::NcclLog log = ParseNcclLog(text);
  EXPECT_EQ(log.results.size(), 3u);
  EXPECT_EQ(log.results[0].code, 2);
  EXPECT_EQ(log.results[2].logger.host, "");
  auto failures = DiagnoseNcclFailures(log);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].cause, "shm-too-small");
  EXPECT_EQ(failures[0].lines, 2u);
  EXPECT_EQ(failures[0].first_line, 3u);
  EXPECT_EQ(failures[0].host, "node0");
  EXPECT_EQ(failures[0].pid, 4711);
  ASSERT_EQ(failures[0].evidence.size(), 2u);
  EXPECT_NE(failures[0].evidence[0].find("No space left on device (28)"), std::string::npos) << failures[0].evidence[0];
  EXPECT_NE(failures[0].evidence[0].find("line 3 (node0 pid 4711)"), std::string::npos) << failures[0].evidence[0];
}

// A failed return code with no WARN line to explain it is a finding of its own.
TEST(NcclFailures, AReturnCodeWithoutAWarnLine) {
  const char* text =
      "node0:7:8 [1] NCCL INFO misc/socket.cc:50 -> 6 (Connection reset by peer)\n"
      "node0:7:8 [1] NCCL INFO transport.cc:197 -> 0\n";
  auto failures = DiagnoseNcclFailures(ParseNcclLog(text));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].cause, "peer-process-failed");
  EXPECT_EQ(failures[0].lines, 1u);
}

// A job's logs together: one entry per cause over all files; the program's error line is explained
// by another file's WARN, while another process's own failed call (no WARN of its own) stays.
TEST(NcclFailures, SeveralLogsOfOneJob) {
  p2ptrace::NcclLog a = ParseNcclLog(
      "box:1:1 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-a to 5242880 bytes, error: No space left on device (28)\n");
  p2ptrace::NcclLog b = ParseNcclLog(
      "box:2:2 [1] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-b to 5242880 bytes, error: No space left on device (28)\n");
  p2ptrace::NcclLog c = ParseNcclLog("box:3:3 [2] NCCL INFO misc/socket.cc:50 -> 6\n");
  p2ptrace::NcclLog out = ParseNcclLog(
      "[rank 1] nccl_ring: ncclAllReduce(…) failed: unhandled system error (run with NCCL_DEBUG=INFO for details)\n");
  auto failures = DiagnoseNcclFailures({{"a.log", &a}, {"b.log", &b}, {"c.log", &c}, {"out.txt", &out}});
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0].cause, "shm-too-small");
  EXPECT_EQ(failures[0].lines, 2u);
  EXPECT_EQ(failures[0].file, "a.log");
  ASSERT_EQ(failures[0].evidence.size(), 2u);
  EXPECT_TRUE(failures[0].evidence[1].starts_with("b.log:1 (box pid 2): NCCL WARN")) << failures[0].evidence[1];
  EXPECT_EQ(failures[1].cause, "peer-process-failed");
  EXPECT_EQ(failures[1].pid, 3);
  // Without the WARN lines, the program's line is the only word: ncclSystemError's cause.
  auto alone = DiagnoseNcclFailures({{"out.txt", &out}});
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].cause, "nccl-system-error");
}

}  // namespace
