// Never hurt the job, never trust the trace directory: each test makes the ground the
// shim stands on hostile the way real machines do — a full disk, descriptors closed under it, FIFOs
// and symlinks planted in a shared directory, a directory it cannot write, a runtime unloaded under
// it — and checks that the traced program behaves byte for byte as its bare run, and that the shim
// says what it could not do. The programs: hostile_workload (linked to the real cudart and NCCL),
// peer_copy, /bin/sh; all on the simulated node.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/trace_reader.h"
#include "p2ptrace/vocabulary.h"
#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using p2ptrace::testing::Env;
using p2ptrace::testing::ReadFile;
using p2ptrace::testing::RunProgram;
using p2ptrace::testing::RunResult;
using p2ptrace::testing::TempDir;
using p2ptrace::testing::WriteFile;

const std::string kTopology = std::string(P2PTRACE_TOPOLOGY_DIR) + "/demo-8gpu.json";

// The simulated node, nothing inherited that the shim, the sim or NCCL would read.
Env Sim() {
  Env env;
  for (const char* name :
       {"LD_PRELOAD", "P2PTRACE_DIR", "P2PTRACE_SAMPLE", "P2PTRACE_MAX_MB", "P2PTRACE_DISABLE", "P2PTRACE_SYSROOT",
        "P2PTRACE_NCCL_TAP", "P2PTRACE_NCCL_TAP_FILE", "P2PTRACE_NCCL_FORWARD", "P2PTRACE_NCCL_LOG", "RANK",
        "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES",
        "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "P2PSIM_HOST"})
    env[name] = std::nullopt;
  env["LD_LIBRARY_PATH"] = P2PTRACE_SIM_LIB_DIR;
  env["P2PSIM_TOPOLOGY"] = kTopology;
  env["P2PSIM_NCCL_TIMEOUT"] = "30";
  env["P2PTRACE_WARN"] = "off";
  return env;
}

// The shim's settings; the shim itself is preloaded by Shim() into the traced program only, never
// into the tools around it (timeout, sh, unshare, setpriv, cp: not instrumented in sanitizer builds).
Env Traced(Env env, const std::string& dir) {
  env["P2PTRACE_DIR"] = dir;
  return env;
}
std::vector<std::string> Shim(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"env", std::string("LD_PRELOAD=") + SHIM_LIB});
  return argv;
}

// Every run under a deadline: a hang is a failure (exit 124), not a stuck CI job.
RunResult RunTimed(std::vector<std::string> argv, const Env& env) {
  argv.insert(argv.begin(), {"timeout", "-s", "KILL", "60"});
  return RunProgram(argv, env);
}

std::vector<std::string> Traces(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".p2ptrace") out.push_back(e.path().string());
  return out;
}

std::string Host() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  std::string s = h;
  return s.substr(0, s.find('.'));
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// stderr of a traced run that is the bare run's plus exactly one shim warning about `what`.
void ExpectOneWarning(const RunResult& traced, const RunResult& bare, const std::string& what) {
  EXPECT_EQ(Count(traced.err, "p2ptrace: warning:"), 1u) << traced.err;
  EXPECT_NE(traced.err.find(what), std::string::npos) << traced.err;
  EXPECT_NE(traced.err.find("runs untraced"), std::string::npos) << traced.err;
  std::string rest = traced.err;
  size_t at = rest.find("p2ptrace: warning:");
  if (at != std::string::npos) rest.erase(at, rest.find('\n', at) + 1 - at);
  EXPECT_EQ(rest, bare.err);
}

// A mount namespace of the test's own: root has one with `unshare -m` (a chroot or container may
// refuse user namespaces, never root this); an ordinary user with `unshare -Urm` (root in it) where
// the kernel allows it. Either can mount a tiny or read-only tmpfs there.
const char* UnshareFlags() { return geteuid() == 0 ? "-m" : "-Urm"; }
bool CanMount() {
  static bool ok = RunProgram({"unshare", UnshareFlags(), "sh", "-c", "mount -t tmpfs -o size=64k none /mnt"}).exit_code == 0;
  return ok;
}
// Why not: under chroot this process's root is no mount point (/proc/self/mountinfo lists none at
// "/"), and unshare cannot make it private, so no mount namespace can be made (tests/skips-allowed.txt
// allows the skip for this reason only).
std::string NoMountWhy() {
  std::ifstream in("/proc/self/mountinfo");
  bool root_mounted = false, read = false;
  for (std::string line; std::getline(in, line);) {
    read = true;
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    if (fields >> id >> parent >> dev >> root >> mount_point && mount_point == "/") root_mounted = true;
  }
  return read && !root_mounted ? "in a chroot (its root is no mount point), unshare cannot make the root private: no small "
                                 "filesystem can be mounted"
                               : std::string("no mount namespace here (unshare ") + UnshareFlags() + ")";
}

// argv run inside a new mount namespace with a tmpfs of `options` mounted at `dir` (created 0700),
// then `after` (a shell command; $D is `dir`) while the mount still exists.
std::vector<std::string> OnTmpfs(const std::string& dir, const std::string& options, const std::string& after,
                                 const std::vector<std::string>& argv) {
  std::vector<std::string> v = {"unshare", UnshareFlags(), "sh", "-c",
                                "D=\"$0\"; mount -t tmpfs -o " + options + ",mode=0700 p2ptrace-test \"$D\" || exit 99; "
                                "\"$@\"; rc=$?; " + after + "; exit $rc",
                                dir};
  v.insert(v.end(), argv.begin(), argv.end());
  return v;
}

// --- 1. A full disk costs records, never the job ---------------------------------------------------

struct FullDiskCase {
  const char* name;
  std::vector<std::string> argv;
};

TEST(FullDisk, ProgramsRunOnUnchangedAndTheDropsAreCountedAndReported) {
  if (!CanMount()) GTEST_SKIP() << NoMountWhy();
  std::vector<FullDiskCase> cases = {
      {"copy loop", {HOSTILE_WORKLOAD, "copies", "4000"}},
      {"nccl ring", {HOSTILE_WORKLOAD, "ring", "3000"}},
      {"peer_copy", {PEER_COPY, "--size", "64K", "--iters", "300"}},
  };
  for (const FullDiskCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::string base = TempDir() + "/full-" + std::to_string(&c - cases.data());
    std::string dir = base + "/mnt", copy = base + "/copy";
    fs::create_directories(dir);
    fs::create_directories(copy);
    RunResult bare = RunTimed(c.argv, Sim());
    ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
    Env env = Traced(Sim(), dir);
    env["P2PTRACE_SAMPLE"] = "all";
    // 256 KiB: the trace's header region (128 KiB), a chunk or two, and the NCCL log, then full.
    RunResult traced = RunTimed(OnTmpfs(dir, "size=256k", "cp -r --sparse=always \"$D\"/. " + copy, Shim(c.argv)), env);
    ASSERT_NE(traced.exit_code, 99) << "mount failed: " << traced.err;
    EXPECT_EQ(traced.signal, 0) << traced.err;
    EXPECT_EQ(traced.exit_code, 0) << traced.err;
    EXPECT_EQ(traced.out, bare.out);
    std::vector<std::string> files = Traces(copy);
    ASSERT_EQ(files.size(), 1u) << traced.err;
    auto t = p2ptrace::ReadTrace(files[0]);
    ASSERT_TRUE(t) << t.error().message;
    EXPECT_GT(t->header.dropped_records, 0u);
    EXPECT_TRUE(t->header.capture_flags & P2PTRACE_CAPTURE_NO_SPACE);
    RunResult report = RunProgram({P2PTRACE_CLI, "report", copy}, Sim());
    EXPECT_NE(report.out.find("filesystem was full"), std::string::npos) << report.out << report.err;
  }
}

// A file size limit (ulimit -f): a write past it is a SIGXFSZ that kills the process. The trace is
// made to fit (or not made), and NCCL is not tapped (its lines could cross it; bare, it writes none).
TEST(FullDisk, AFileSizeLimitIsNeverCrossed) {
  for (const char* limit : {"3145728", "65536"}) {
    for (std::vector<std::string> argv : {std::vector<std::string>{HOSTILE_WORKLOAD, "copies", "3000"},
                                          std::vector<std::string>{HOSTILE_WORKLOAD, "ring", "20"}}) {
      SCOPED_TRACE(std::string(limit) + " " + argv[1]);
      std::string dir = TempDir() + "/fsize-" + limit + "-" + argv[1];
      std::vector<std::string> bare_argv = {"prlimit", std::string("--fsize=") + limit, "--"}, traced_argv = bare_argv;
      bare_argv.insert(bare_argv.end(), argv.begin(), argv.end());
      std::vector<std::string> shim = Shim(argv);
      traced_argv.insert(traced_argv.end(), shim.begin(), shim.end());
      RunResult bare = RunTimed(bare_argv, Sim());
      ASSERT_EQ(bare.exit_code, 0) << bare.err;
      Env env = Traced(Sim(), dir);
      env["P2PTRACE_SAMPLE"] = "all";
      RunResult traced = RunTimed(traced_argv, env);
      EXPECT_EQ(traced.signal, 0) << traced.err;  // SIGXFSZ
      EXPECT_EQ(traced.exit_code, 0) << traced.err;
      EXPECT_EQ(traced.out, bare.out);
      std::vector<std::string> files = Traces(dir);
      if (std::string(limit) == "65536") {
        ExpectOneWarning(traced, bare, "the file size limit (ulimit -f, 65536 bytes)");
        EXPECT_TRUE(files.empty());
        continue;
      }
      ASSERT_EQ(files.size(), 1u);
      EXPECT_LE(fs::file_size(files[0]), 3145728u);
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir, ec)) EXPECT_NE(e.path().filename().string().rfind("nccl.", 0), 0u);
    }
  }
}

// --- 2. Descriptors the program closes and reopens -------------------------------------------------

TEST(ClosedDescriptors, NcclNeverWritesIntoTheProgramsFiles) {
  std::string base = TempDir() + "/closefds";
  fs::create_directories(base);
  RunResult bare = RunTimed({HOSTILE_WORKLOAD, "closefds", base + "/bare.data"}, Sim());
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  RunResult traced = RunTimed(Shim({HOSTILE_WORKLOAD, "closefds", base + "/traced.data"}), Traced(Sim(), base + "/trace"));
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(ReadFile(base + "/traced.data"), ReadFile(base + "/bare.data"));
  EXPECT_EQ(ReadFile(base + "/bare.data"), "program data before NCCL\nprogram data after NCCL\n");
  EXPECT_EQ(traced.out, bare.out);
  EXPECT_EQ(traced.err, bare.err);
  EXPECT_EQ(Traces(base + "/trace").size(), 1u);
}

// --- 3. FIFOs where the shim's files go -------------------------------------------------------------

TEST(Fifos, AtTheTapFileAndTheIdentityTempNothingHangs) {
  std::string dir = TempDir() + "/fifos";
  fs::create_directories(dir + "/.p2ptrace-ranks");
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  fs::permissions(dir + "/.p2ptrace-ranks", fs::perms::owner_all, fs::perm_options::replace);
  // `exec` keeps the shell's pid, so the FIFOs sit at exactly this process's names.
  std::string plant = "mkfifo \"$0/nccl." + Host() + ".$$.log\" \"$0/.p2ptrace-ranks/$$.id.tmp\" && exec env "
                      "LD_PRELOAD=" SHIM_LIB " \"$@\"";
  Env env = Traced(Sim(), dir);
  env["WORLD_SIZE"] = "2";  // the identity exchange runs (and waits, bounded, for the other rank)
  env["RANK"] = "0";
  env["P2PTRACE_RANK_WAIT_MS"] = "200";
  env["P2PTRACE_WARN"] = "rank";
  RunResult ring = RunTimed({"sh", "-c", plant, dir, HOSTILE_WORKLOAD, "ring", "2"}, env);
  EXPECT_EQ(ring.exit_code, 0) << "124: hung\n" << ring.err;
  EXPECT_NE(ring.out.find("ring 2: first value 6"), std::string::npos) << ring.out;
  // A process that never calls CUDA or NCCL: nothing of the tap's is read at its exit.
  RunResult trivial = RunTimed({"sh", "-c", plant, dir, HOSTILE_WORKLOAD, "untouched", dir}, env);
  EXPECT_EQ(trivial.exit_code, 0) << "124: hung\n" << trivial.err;
}

// --- 4. A trace directory the shim cannot use ------------------------------------------------------

TEST(UnusableDirectory, UntracedMeansTheBareRunsOutputExactly) {
  RunResult bare = RunTimed({HOSTILE_WORKLOAD, "ring", "2"}, Sim());
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  std::string base = TempDir() + "/unusable";
  fs::create_directories(base + "/open");
  fs::permissions(base + "/open", fs::perms::all, fs::perm_options::replace);  // 0777: anyone could plant files
  WriteFile(base + "/file", "x");
  struct Case {
    const char* name;
    std::string dir;
    const char* why;
  };
  for (const Case& c : {Case{"writable by others", base + "/open", "writable by other users"},
                        Case{"under a file", base + "/file/trace", "cannot create it"},
                        // The warning names the directory escaped: its bytes cannot act on the terminal.
                        Case{"escapes in its name", base + "/file/\x1b]0;title\x07", "/file/\\x1b]0;title\\x07: cannot"}}) {
    SCOPED_TRACE(c.name);
    RunResult traced = RunTimed(Shim({HOSTILE_WORKLOAD, "ring", "2"}), Traced(Sim(), c.dir));
    EXPECT_EQ(traced.exit_code, 0) << traced.err;
    EXPECT_EQ(traced.out, bare.out);  // no NCCL INFO line on stdout
    ExpectOneWarning(traced, bare, c.why);
    EXPECT_EQ(traced.err.find('\x1b'), std::string::npos);
  }
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(base + "/open", ec));
  if (!CanMount()) GTEST_SKIP() << NoMountWhy() << ": the read-only case is not run";
  std::string ro = base + "/ro";
  fs::create_directories(ro);
  RunResult traced = RunTimed(OnTmpfs(ro, "ro,size=64k", "true", Shim({HOSTILE_WORKLOAD, "ring", "2"})), Traced(Sim(), ro));
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, bare.out);
  ExpectOneWarning(traced, bare, "cannot write in it");
}

// The CLI's atomic writes (rows, Prometheus): on a disk that fills while the temporary file is being
// written, the command fails with one line, the older file keeps what it held, and no temporary
// file is left beside it (tools/common/output_file.h).
TEST(FullDisk, AnAtomicWriteThatFailsLateKeepsTheOlderFile) {
  if (!CanMount()) GTEST_SKIP() << NoMountWhy();
  std::string base = TempDir() + "/atomic", job = base + "/job", disk = base + "/disk";
  fs::create_directories(disk);
  ASSERT_EQ(RunProgram({P2PTRACE_CLI, "synth", "--ranks", "64", "--events", "20", "--out", job}).exit_code, 0);
  // The older files first (they fit), then the exports, each far larger than the 32 KiB disk.
  std::string script = "echo old-rows > \"$D/rows.ndjson\" && echo old-prom > \"$D/p.prom\" || exit 98; " +
                       std::string(P2PTRACE_CLI) + " export \"$1\" --rows \"$D/rows.ndjson\" 2>\"$D/rows.err\"; echo rows=$?; " +
                       P2PTRACE_CLI + " export \"$1\" --prometheus \"$D/p.prom\" 2>\"$D/prom.err\"; echo prom=$?";
  std::string after = "cat \"$D/rows.ndjson\" \"$D/p.prom\" \"$D/rows.err\" \"$D/prom.err\"; ls -A \"$D\"";
  RunResult r = RunProgram(OnTmpfs(disk, "size=32k", after, {"sh", "-c", "D=" + disk + "; " + script, "sh", job}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rows=2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prom=2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("old-rows\nold-prom\n"), std::string::npos) << "the older files, whole: " << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  // What is left on the disk: the two older files and the two error files, no temporary.
  EXPECT_EQ(r.out.find(".tmp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("p.prom\nprom.err\nrows.err\nrows.ndjson\n"), std::string::npos) << r.out;
}

// --- 5. A runtime unloaded under the shim ------------------------------------------------------------

TEST(Unload, ALibraryLinkedToCudartOpenedAndClosedAgainAndAgain) {
  RunResult bare = RunTimed({UNLOAD_WORKLOAD, UNLOAD_COPY_LIB, "3"}, Sim());
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  for (int run = 0; run < 10; ++run) {
    std::string dir = TempDir() + "/unload-" + std::to_string(run);
    Env env = Traced(Sim(), dir);
    env["P2PTRACE_SAMPLE"] = "all";  // the timing resolver holds events of every runtime instance
    RunResult traced = RunTimed(Shim({UNLOAD_WORKLOAD, UNLOAD_COPY_LIB, "3"}), env);
    ASSERT_EQ(traced.signal, 0) << "run " << run << ": " << traced.err;
    ASSERT_EQ(traced.exit_code, 0) << "run " << run << ": " << traced.out << traced.err;
    EXPECT_EQ(traced.out, bare.out);
    std::vector<std::string> files = Traces(dir);
    ASSERT_EQ(files.size(), 1u);
    auto t = p2ptrace::ReadTrace(files[0]);
    ASSERT_TRUE(t) << t.error().message;
    uint64_t bytes = 0;  // three rounds of 8 copies of 1 MiB 0->1, through three loads of the runtime
    for (const p2ptrace::PairCounter& c : t->counters) bytes += c.c.bytes;
    EXPECT_EQ(bytes, 24u << 20);
  }
}

// --- 6. errno ---------------------------------------------------------------------------------------

TEST(Errno, EveryWrappedCallLeavesTheErrnoTheRealOneLeft) {
  std::string dir = TempDir() + "/errno";
  fs::create_directories(dir);  // exists: the shim's mkdir -p meets EEXIST
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  RunResult bare = RunTimed({HOSTILE_WORKLOAD, "errno"}, Sim());
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  // With timing on, NCCL loads the shim as its profiler plugin at the first communicator's init,
  // where bare its dlopen of libnccl-profiler.so fails: the errno NCCL leaves after that successful
  // init is its own leftover from a different path (ENOENT bare), not the shim's. Every other line
  // is exact, and exact everywhere without the plugin.
  auto without_plugin_init = [](std::string out) {
    size_t at = out.find("ncclCommInitAll(");
    if (at != std::string::npos) out.erase(at, out.find('\n', at) - at);
    return out;
  };
  for (std::string sample : {"off", "all", "all/no-profiler"}) {
    SCOPED_TRACE(sample);
    Env env = Traced(Sim(), dir + "/" + sample);
    env["P2PTRACE_SAMPLE"] = sample.substr(0, 3) == "all" ? "all" : "off";
    if (sample == "all/no-profiler") env["P2PTRACE_NCCL_PROFILER"] = "off";
    env["P2PTRACE_WARN"] = "rank";  // the job-start check's probes run too
    RunResult traced = RunTimed(Shim({HOSTILE_WORKLOAD, "errno"}), env);
    EXPECT_EQ(traced.exit_code, 0) << traced.err;
    if (sample == "all") EXPECT_EQ(without_plugin_init(traced.out), without_plugin_init(bare.out));
    else EXPECT_EQ(traced.out, bare.out);
  }
  EXPECT_NE(bare.out.find("cudaMalloc(&a, 1 << 20)"), std::string::npos) << bare.out;
  // dlerror()'s text, taken before an fopen and printed after it, as NCCL's WARN for a missing
  // libcuda.so does: the shim's fopen must not touch the dlerror state (it once freed that text).
  RunResult bare_dl = RunTimed({HOSTILE_WORKLOAD, "dlerror"}, Sim());
  RunResult traced_dl = RunTimed(Shim({HOSTILE_WORKLOAD, "dlerror"}), Traced(Sim(), dir + "/dlerror"));
  EXPECT_NE(bare_dl.out.find("libp2ptrace-test-missing.so"), std::string::npos) << bare_dl.out;
  EXPECT_EQ(traced_dl.out, bare_dl.out);
  EXPECT_EQ(traced_dl.exit_code, 0) << traced_dl.err;
}

// --- 6b. An NCCL that drives the profiler plugin wrongly ---------------------------------------------

TEST(ProfilerPlugin, AnNcclGoneWrongBreaksNothingAndWritesOnlyWhatWasMeasured) {
  std::string dir = TempDir() + "/profiler";
  Env env = Traced(Sim(), dir);
  env["P2PTRACE_SAMPLE"] = "all";
  RunResult r = RunTimed(Shim({HOSTILE_WORKLOAD, "profiler"}), env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            // P2p, Coll and KernelCh go into the mask only for the sampled calls the wrappers make:
            // this NCCL calls the plugin without any, so its events are all taken.
            "plugin p2ptrace mask 0x0\n"
            "channel 200: null\n"
            "storm: 4094 held\n"  // 4096 pending at most: the clean send left, the partial and channel 200's stay
            "after finalize: null\n"
            "done\n");
  EXPECT_EQ(r.err, "");
  std::vector<std::string> files = Traces(dir);
  ASSERT_EQ(files.size(), 1u);
  auto t = p2ptrace::ReadTrace(files[0]);
  ASSERT_TRUE(t) << t.error().message;
  std::vector<p2ptrace_nccl_kernel_record> kernels;
  int threaded = 0;
  for (const p2ptrace::TraceRecord& rec : t->records)
    if (const auto* k = std::get_if<p2ptrace_nccl_kernel_record>(&rec.body)) {
      if (k->comm_hash != 0xdef) {
        kernels.push_back(*k);
        continue;
      }
      // The threaded communicator's: every send once, both channels in, whichever thread came last.
      ++threaded;
      EXPECT_EQ(k->channel_mask, 3u);
      EXPECT_EQ(k->duration_ns, 201u);
      EXPECT_EQ(k->flags, 0u);
    }
  EXPECT_EQ(threaded, 2000);
  // The clean send, and the collective finalized in flight with the one channel that stopped; none
  // of the storm's (no channel stopped), nothing after finalize.
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].api, P2PTRACE_NCCL_Send);
  EXPECT_EQ(kernels[0].bytes, 4096u);
  EXPECT_EQ(kernels[0].peer, 1);
  EXPECT_EQ(kernels[0].channel_mask, 3u);
  EXPECT_EQ(kernels[0].gpu_start_ns, 1000u);
  EXPECT_EQ(kernels[0].duration_ns, 2100u);
  EXPECT_EQ(kernels[0].channel_ns, 4000u);
  EXPECT_EQ(kernels[0].flags, 0u);
  EXPECT_EQ(kernels[0].comm_hash, 0xabcu);
  EXPECT_EQ(kernels[1].api, P2PTRACE_NCCL_AllReduce);
  EXPECT_EQ(kernels[1].channel_mask, 1u);
  EXPECT_EQ(kernels[1].duration_ns, 2000u);
  EXPECT_EQ(kernels[1].flags, static_cast<uint32_t>(P2PTRACE_NCCL_KERNEL_PARTIAL));
  // Bare, the program's NCCL finds no plugin: the shim's is the shim's.
  RunResult bare = RunTimed({HOSTILE_WORKLOAD, "profiler"}, Sim());
  EXPECT_EQ(bare.out, "no profiler plugin\n");
}

// --- 7. Nothing before the first CUDA or NCCL call -------------------------------------------------

TEST(Untouched, AProcessThatNeverCallsCudaOrNcclIsLeftExactlyAsItWas) {
  std::string cwd = TempDir() + "/untouched";
  fs::create_directories(cwd);
  // Its environment and its working directory's entries, as the program itself sees them at exit.
  Env env = Sim();
  env["P2PTRACE_WARN"] = std::nullopt;
  auto in_cwd = [&](std::vector<std::string> v) {  // started in `cwd`, where ./p2ptrace-* would appear
    v.insert(v.begin(), {"sh", "-c", "cd \"$0\" && exec \"$@\"", cwd});
    return v;
  };
  RunResult bare = RunTimed(in_cwd({"env", "LD_PRELOAD=", HOSTILE_WORKLOAD, "untouched", "."}), env);
  RunResult traced = RunTimed(in_cwd(Shim({HOSTILE_WORKLOAD, "untouched", "."})), env);
  EXPECT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  auto without_preload = [](std::string out) {
    size_t at = out.find("LD_PRELOAD=");
    if (at != std::string::npos) out.erase(at, out.find('\n', at) + 1 - at);
    return out;
  };
  EXPECT_EQ(without_preload(traced.out), without_preload(bare.out));  // no NCCL_DEBUG, no P2PTRACE_DIR
  EXPECT_NE(bare.out.find("entries: 0\n"), std::string::npos) << bare.out;
  EXPECT_NE(traced.out.find("entries: 0\n"), std::string::npos) << traced.out;  // no ./p2ptrace-*
  EXPECT_EQ(traced.err, bare.err);
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(cwd, ec));
}

// --- 8. The trace directory is shared ground --------------------------------------------------------

// Runs argv as `uid` (setpriv, util-linux); empty when this test cannot switch users (not root).
std::vector<std::string> As(int uid, std::vector<std::string> argv) {
  std::vector<std::string> v = {"setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
                                "--clear-groups"};
  v.insert(v.end(), argv.begin(), argv.end());
  return v;
}

TEST(SharedDirectory, AnotherUsersPlantedLinksAndFilesNeverReachTheVictim) {
  if (geteuid() != 0) GTEST_SKIP() << "two users needed: run as root (the test switches to uids 65533 and 65534)";
  constexpr int kVictim = 65533, kAttacker = 65534;
  // A /scratch-like root: world-writable and sticky; each user's home private.
  std::string base = TempDir() + "/shared";
  fs::create_directories(base);
  fs::permissions(TempDir(), fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::replace);
  std::string scratch = base + "/scratch", home = base + "/victim";
  fs::create_directories(scratch);
  fs::create_directories(home);
  fs::permissions(base, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::replace);
  fs::permissions(scratch, fs::perms::all | fs::perms::sticky_bit, fs::perm_options::replace);
  WriteFile(home + "/secret", "the victim's own data\n");
  ASSERT_EQ(chown(home.c_str(), kVictim, kVictim), 0);
  ASSERT_EQ(chown((home + "/secret").c_str(), kVictim, kVictim), 0);
  fs::permissions(home, fs::perms::owner_all, fs::perm_options::replace);
  fs::permissions(home + "/secret", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);

  // The attacker pre-creates the job's trace directory, open to all, with links at every name the
  // victim's shim and NCCL would write: the markers and, for the next pids, the NCCL tap file.
  std::string job = scratch + "/p2ptrace-job";
  std::string plant = "mkdir -m 0777 \"$0\" && ln -s \"$1\" \"$0/.p2ptrace-ranks\" && ln -s \"$1\" \"$0/.p2ptrace-warned\" "
                      "&& p=$(cat /proc/sys/kernel/ns_last_pid) && for i in $(seq $((p + 1)) $((p + 400))); do "
                      "ln -s \"$1/secret\" \"$0/nccl." + Host() + ".$i.log\"; done";
  RunResult planted = RunProgram(As(kAttacker, {"sh", "-c", plant, job, home}));
  ASSERT_EQ(planted.exit_code, 0) << planted.err;

  Env env = Sim();
  env["P2PTRACE_WARN"] = "rank";
  env["WORLD_SIZE"] = "2";
  env["RANK"] = "0";
  env["P2PTRACE_RANK_WAIT_MS"] = "200";
  RunResult bare = RunTimed(As(kVictim, {HOSTILE_WORKLOAD, "ring", "2"}), env);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  RunResult traced = RunTimed(As(kVictim, Shim({HOSTILE_WORKLOAD, "ring", "2"})), Traced(env, job));
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, bare.out);
  ExpectOneWarning(traced, bare, "owned by uid 65534");
  EXPECT_EQ(ReadFile(home + "/secret"), "the victim's own data\n");
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(home)) ++entries;
  EXPECT_EQ(entries, 1u) << "the shim wrote through a planted link into the victim's home";

  // In a directory of the victim's own, an identity file someone else's process left (or a buggy
  // one wrote) is validated: escapes never reach the terminal, a false rank is ignored.
  std::string own = home + "/trace";
  RunResult made = RunProgram(As(kVictim, {"sh", "-c", "mkdir -m 0700 \"$0\" \"$0/.p2ptrace-ranks\" && printf "
                                                       "'host \\033]0;EVIL\\007\\nboot_id x\\nrank 1\\nbus 0000:2a:00.0\\n"
                                                       "pid 99999\\ngpu 1\\n' > \"$0/.p2ptrace-ranks/99999.id\"",
                                           own}));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  RunResult ranks = RunTimed(As(kVictim, Shim({HOSTILE_WORKLOAD, "ring", "2"})), Traced(env, own));
  EXPECT_EQ(ranks.exit_code, 0) << ranks.err;
  EXPECT_EQ(ranks.err.find('\x1b'), std::string::npos) << ranks.err;
  EXPECT_EQ(ranks.err.find("EVIL"), std::string::npos) << ranks.err;
}

}  // namespace
