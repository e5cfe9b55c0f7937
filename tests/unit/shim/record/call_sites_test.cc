// Call-site capture (shim/record/call_sites) in a process of its own. The capture code and the trace
// writer are linked into a shared library (call_sites_under_test), as they are into libp2ptrace.so,
// so its frames are "the shim's" and left out; this program's functions, exported (-rdynamic), are
// the application whose call sites it names. The trace it writes is read back with core's reader.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/trace_reader.h"
#include "shim/base/config.h"
#include "shim/record/call_sites.h"
#include "shim/record/trace_writer.h"
#include "tests/support/subprocess.h"

using p2ptrace::shim::CaptureCallSite;

// Application call sites. noinline and the barrier after the call keep each a frame of its own
// (neither inlined into its caller nor a tail call); extern "C" and -rdynamic let dladdr name them.
extern "C" {
__attribute__((noinline, visibility("default"))) uint32_t p2ptrace_test_site_a() {
  uint32_t id = CaptureCallSite();
  asm volatile("" ::: "memory");
  return id;
}
__attribute__((noinline, visibility("default"))) uint32_t p2ptrace_test_site_b() {
  uint32_t id = CaptureCallSite();
  asm volatile("" ::: "memory");
  return id;
}
__attribute__((noinline, visibility("default"))) uint32_t p2ptrace_test_site_threads() {
  uint32_t id = CaptureCallSite();
  asm volatile("" ::: "memory");
  return id;
}
}

namespace {

std::vector<std::string> g_warnings;
void CollectWarning(const std::string& w) { g_warnings.push_back(w); }

std::string TraceDir() {
  static const std::string dir = p2ptrace::testing::TempDir() + "/call-sites";
  return dir;
}

// Tracing into TraceDir() with call sites on (once per process).
void Start() {
  static bool started = [] {
    p2ptrace::shim::Config c;
    c.dir = TraceDir();
    c.max_bytes = 4ull << 20;
    c.stack_depth = 8;
    p2ptrace::shim::TraceWriter::Configure(c);
    return p2ptrace::shim::StartCallSites(c.stack_depth, CollectWarning);
  }();
  ASSERT_TRUE(started) << (g_warnings.empty() ? "" : g_warnings[0]);
}

// The trace file of process `pid` in TraceDir().
p2ptrace::Trace ReadTraceOf(pid_t pid) {
  std::string tag = ".p" + std::to_string(pid) + ".p2ptrace";
  for (const auto& e : std::filesystem::directory_iterator(TraceDir())) {
    std::string name = e.path().filename().string();
    if (name.size() > tag.size() && name.compare(name.size() - tag.size(), tag.size(), tag) == 0) {
      auto t = p2ptrace::ReadTrace(e.path().string());
      EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
      if (t.ok()) return std::move(t.value());
    }
  }
  ADD_FAILURE() << "no trace of pid " << pid << " in " << TraceDir();
  return {};
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::string Exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// Runs first (gtest keeps the file's order): nothing is captured before StartCallSites.
TEST(CallSites, OffUntilStartedAndThenOn) {
  EXPECT_FALSE(p2ptrace::shim::CallSitesEnabled());
  EXPECT_EQ(p2ptrace::shim::CaptureCallSite(), 0u);
  EXPECT_FALSE(std::filesystem::exists(TraceDir()));  // off: not even the trace is opened
  Start();
  EXPECT_TRUE(p2ptrace::shim::CallSitesEnabled());
  EXPECT_TRUE(g_warnings.empty());
}

TEST(CallSites, ThreadsAtOneSiteShareOneIdDescribedOnce) {
  Start();
  constexpr int kThreads = 8;
  static volatile int calls = 200;  // not unrolled: one call instruction
  std::vector<std::vector<uint32_t>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&ids, i] {
      for (int k = 0; k < calls; ++k) ids[i].push_back(p2ptrace_test_site_threads());
    });
  for (std::thread& th : threads) th.join();
  uint32_t id = ids[0][0];
  ASSERT_NE(id, 0u);
  for (const auto& v : ids) EXPECT_EQ(v, std::vector<uint32_t>(static_cast<size_t>(calls), id));
  p2ptrace::Trace t = ReadTraceOf(getpid());
  const p2ptrace::CallSite* s = t.FindCallSite(id);
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->frames[0].find("p2ptrace_test_site_threads"), std::string::npos) << s->frames[0];
  EXPECT_EQ(Count(Slurp(t.path), " (p2ptrace_test_site_threads+0x"), 1u);
}

// A forked child writes its own file: a site the parent described is described again there, under
// the same id.
TEST(CallSites, ForkChildDescribesTheSiteInItsOwnFile) {
  Start();
  uint32_t ids[2] = {0, 0};
  pid_t child = -1;
  volatile int rounds = 2;  // not unrolled: one call instruction for both rounds
  for (int round = 0; round < rounds; ++round) {
    ids[round] = p2ptrace_test_site_a();  // one call site in both rounds
    if (round == 0) {
      child = fork();
      ASSERT_GE(child, 0);
      if (child != 0) break;  // the parent stops here; the child captures once more
    }
  }
  if (child == 0) _exit(ids[1] == ids[0] && ids[0] != 0 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child got another id for the same site";
  p2ptrace::Trace t = ReadTraceOf(child);
  EXPECT_TRUE(t.header.capture_flags & P2PTRACE_CAPTURE_FORK_CHILD);
  const p2ptrace::CallSite* s = t.FindCallSite(ids[0]);
  ASSERT_NE(s, nullptr) << t.path << " describes " << t.call_sites.size() << " sites";
  EXPECT_NE(s->frames[0].find(" (p2ptrace_test_site_a+0x"), std::string::npos) << s->frames[0];
  EXPECT_EQ(t.call_sites.size(), 1u);  // only what the child itself used
}

TEST(CallSites, DescribeFramesNamesModuleOffsetAndSymbol) {
  uintptr_t pcs[] = {reinterpret_cast<uintptr_t>(&p2ptrace_test_site_b) + 5, 0x11};
  std::string text = p2ptrace::shim::DescribeFrames(pcs, 2);
  std::istringstream in(text);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first.rfind(Exe() + "+0x", 0), 0u) << first;
  EXPECT_NE(first.find(" (p2ptrace_test_site_b+0x4)"), std::string::npos) << first;  // the call instruction: pc - 1
  EXPECT_EQ(second, "0x10");  // in no module: the bare address
}

}  // namespace

// Outside the anonymous namespace: its TestBody is then an exported (-rdynamic) C++ symbol, which
// the frames must show demangled.
TEST(CallSites, TwoSitesTwoIdsTheSameSiteTheSameIdNamedByTheirFunctions) {
  Start();
  std::vector<uint32_t> a, b;
  volatile int rounds = 3;        // not unrolled: each call below stays one call instruction
  for (int i = 0; i < rounds; ++i) {  // each call below is one call site, whatever the iteration
    a.push_back(p2ptrace_test_site_a());
    b.push_back(p2ptrace_test_site_b());
  }
  ASSERT_NE(a[0], 0u);
  ASSERT_NE(b[0], 0u);
  EXPECT_NE(a[0], b[0]);
  EXPECT_EQ(a, std::vector<uint32_t>(3, a[0]));
  EXPECT_EQ(b, std::vector<uint32_t>(3, b[0]));

  p2ptrace::Trace t = ReadTraceOf(getpid());
  const p2ptrace::CallSite* sa = t.FindCallSite(a[0]);
  const p2ptrace::CallSite* sb = t.FindCallSite(b[0]);
  ASSERT_NE(sa, nullptr);
  ASSERT_NE(sb, nullptr);
  // Innermost first: the function that made the call, then its caller (a demangled C++ name), at
  // most the 8 frames asked for, each "MODULE+0xOFFSET (SYMBOL+0xOFF)".
  ASSERT_GE(sa->frames.size(), 2u);
  EXPECT_LE(sa->frames.size(), 8u);
  EXPECT_EQ(sa->frames[0].rfind(Exe() + "+0x", 0), 0u) << sa->frames[0];
  EXPECT_NE(sa->frames[0].find(" (p2ptrace_test_site_a+0x"), std::string::npos) << sa->frames[0];
  EXPECT_NE(sb->frames[0].find(" (p2ptrace_test_site_b+0x"), std::string::npos) << sb->frames[0];
  EXPECT_NE(sa->frames[1].find("TwoSitesTwoIdsTheSameSiteTheSameIdNamedByTheirFunctions_Test::TestBody()+0x"),
            std::string::npos)
      << sa->frames[1];
  // No frame of the capturing library itself.
  for (const std::string& f : sa->frames) EXPECT_EQ(f.find("CaptureCallSite"), std::string::npos) << f;
  // Described once in the file, however often the site was seen.
  EXPECT_EQ(Count(Slurp(t.path), sa->frames[0] + "\n" + sa->frames[1] + "\n"), 1u);
}
