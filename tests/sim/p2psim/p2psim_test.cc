// Runs the built `p2psim` as a subprocess and checks what it writes, prints and returns.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace {

namespace fs = std::filesystem;
using p2ptrace::testing::Env;
using Result = p2ptrace::testing::RunResult;
using Child = p2ptrace::testing::ChildProcess;

Result RunP2psim(const std::vector<std::string>& args, const Env& env = {}) {
  std::vector<std::string> argv{P2PSIM_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return Child(argv, env).Finish();
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> SortedLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// A switch without ACS (two GPUs and a nested switch with one), a switch with ACS (two GPUs), and
// a GPU straight under the CPU.
constexpr const char* kIommuTopology = R"({"version": 1, "hosts": [{
  "name": "box", "kernel_cmdline": "ro quiet intel_iommu=on", "virtualization": "passthrough",
  "cpus": [{"id": "cpu0"}],
  "switches": [{"id": "plain", "parent": "cpu0", "acs_redirect": false},
               {"id": "inner", "parent": "plain", "acs_redirect": true},
               {"id": "acs", "parent": "cpu0", "acs_redirect": true}],
  "gpus": [{"index": 0, "bus_id": "0000:1a:00.0", "parent": "plain"},
           {"index": 1, "bus_id": "0000:1b:00.0", "parent": "plain"},
           {"index": 2, "bus_id": "0000:1c:00.0", "parent": "inner"},
           {"index": 3, "bus_id": "0000:3a:00.0", "parent": "acs"},
           {"index": 4, "bus_id": "0000:3b:00.0", "parent": "acs"},
           {"index": 5, "bus_id": "0000:5a:00.0", "parent": "cpu0"}]}]})";

constexpr const char* kTwoHosts = R"({"version": 1, "hosts": [
  {"name": "a", "cpus": [{"id": "cpu0"}], "gpus": [{"index": 0, "bus_id": "0000:1a:00.0"}]},
  {"name": "b", "cpus": [{"id": "cpu0"}],
   "gpus": [{"index": 0, "bus_id": "0000:1a:00.0"}, {"index": 1, "bus_id": "0000:2a:00.0"}]}]})";

class P2psimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/p2psim_test-XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    tmp_ = fs::canonical(templ);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(tmp_ / name) << text;
    return (tmp_ / name).string();
  }

  // Writes `host`'s sysroot of `topology` into a fresh directory and returns it (canonical).
  fs::path Sysroot(const std::string& topology, const std::string& host, const std::string& name = "root") {
    Result r = RunP2psim({"sysroot", topology, host, (tmp_ / name).string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    return fs::canonical(tmp_ / name);
  }

  std::vector<std::string> LaunchArgs(const std::string& topology, const std::string& hosts,
                                      const std::vector<std::string>& command) {
    std::vector<std::string> args{"launch", "--topology", topology, "--hosts", hosts,
                                  "--dir", (tmp_ / "run").string(), "--"};
    args.insert(args.end(), command.begin(), command.end());
    return args;
  }

  fs::path tmp_;
};

fs::path Device(const fs::path& root, const std::string& bdf) {
  return fs::canonical(root / "sys/bus/pci/devices" / bdf);
}

std::string GroupOf(const fs::path& root, const std::string& bdf) {
  return fs::canonical(root / "sys/bus/pci/devices" / bdf / "iommu_group").filename().string();
}

TEST_F(P2psimTest, SysrootDemoPciTree) {
  fs::path root = Sysroot(P2PSIM_DEMO_TOPOLOGY, "node0");
  fs::path link = root / "sys/bus/pci/devices/0000:18:00.0";
  ASSERT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::read_symlink(link).is_relative());
  fs::path gpu0 = Device(root, "0000:18:00.0");
  fs::path sw0 = gpu0.parent_path();
  EXPECT_EQ(sw0.parent_path(), root / "sys/devices/pci0000:00");  // sw0 hangs under CPU0's root
  EXPECT_EQ(ReadFile(sw0 / "class"), "0x060400\n");
  EXPECT_EQ(Device(root, "0000:2a:00.0").parent_path(), sw0);   // GPU 1: also on sw0
  fs::path sw1 = Device(root, "0000:3a:00.0").parent_path();    // GPU 2: sw1, same CPU
  EXPECT_NE(sw1, sw0);
  EXPECT_EQ(sw1.parent_path(), sw0.parent_path());
  fs::path gpu4 = Device(root, "0000:9a:00.0");
  EXPECT_EQ(gpu4.parent_path().parent_path(), root / "sys/devices/pci0000:40");

  EXPECT_EQ(ReadFile(gpu0 / "vendor"), "0x10de\n");
  EXPECT_EQ(ReadFile(gpu0 / "class"), "0x030200\n");
  EXPECT_EQ(ReadFile(gpu0 / "numa_node"), "0\n");
  EXPECT_EQ(ReadFile(gpu4 / "numa_node"), "1\n");
  EXPECT_EQ(ReadFile(gpu0 / "current_link_speed"), "32.0 GT/s PCIe\n");
  EXPECT_EQ(ReadFile(gpu0 / "max_link_speed"), "32.0 GT/s PCIe\n");
  EXPECT_EQ(ReadFile(gpu0 / "current_link_width"), "16\n");
  EXPECT_FALSE(fs::exists(gpu0 / "iommu_group"));

  // The NIC on sw0 is an InfiniBand device of Mellanox under sw0, found as NCCL finds it.
  fs::path nic = fs::canonical(root / "sys/class/infiniband/mlx5_0").parent_path().parent_path();
  EXPECT_EQ(nic.parent_path(), sw0);
  EXPECT_EQ(ReadFile(nic / "vendor"), "0x15b3\n");
  EXPECT_EQ(ReadFile(nic / "class"), "0x020700\n");

  // 8 GPUs, 4 switches, 2 NICs; synthetic ids never take a GPU's bus.
  std::set<std::string> gpu_buses, all;
  for (const char* b : {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"}) gpu_buses.insert(b);
  for (const auto& e : fs::directory_iterator(root / "sys/bus/pci/devices")) {
    std::string bdf = e.path().filename().string();
    all.insert(bdf);
    if (ReadFile(e.path() / "vendor") != "0x10de\n") {
      EXPECT_FALSE(gpu_buses.count(bdf.substr(5, 2))) << bdf;
    }
  }
  EXPECT_EQ(all.size(), 14u);
}

TEST_F(P2psimTest, SysrootDemoHostFacts) {
  fs::path root = Sysroot(P2PSIM_DEMO_TOPOLOGY, "node0");
  EXPECT_EQ(ReadFile(root / "proc/cmdline"), "BOOT_IMAGE=/vmlinuz-6.1.0-18-amd64 root=/dev/nvme0n1p2 ro quiet\n");
  EXPECT_EQ(ReadFile(root / "proc/sys/kernel/random/boot_id"), "8c2f4d1e-0b7a-4c55-9e61-3f1a2b3c4d5e\n");
  EXPECT_EQ(ReadFile(root / "proc/sys/kernel/hostname"), "node0\n");
  EXPECT_EQ(ReadFile(root / "etc/hostname"), "node0\n");
  EXPECT_EQ(ReadFile(root / "p2psim/dev_shm"), "size_mb 65536\ndevice 1\n");
  // No IOMMU on this command line: the groups directory exists and is empty.
  ASSERT_TRUE(fs::is_directory(root / "sys/kernel/iommu_groups"));
  EXPECT_TRUE(fs::is_empty(root / "sys/kernel/iommu_groups"));
  EXPECT_FALSE(fs::exists(root / "sys/class/iommu/dmar0"));

  EXPECT_NE(ReadFile(root / "proc/driver/nvidia/version").find("580.95.05"), std::string::npos);
  std::string params = ReadFile(root / "proc/driver/nvidia/params");
  EXPECT_EQ(params.rfind("ResmanDebugLevel: 4294967295\n", 0), 0u);
  EXPECT_NE(params.find("\nRegistryDwords: \"\"\n"), std::string::npos);
  std::string info = ReadFile(root / "proc/driver/nvidia/gpus/0000:9a:00.0/information");
  EXPECT_NE(info.find("Model: \t\t NVIDIA H100 80GB HBM3\n"), std::string::npos) << info;
  EXPECT_NE(info.find("Bus Location: \t 0000:9a:00.0\n"), std::string::npos) << info;

  EXPECT_EQ(ReadFile(root / "sys/class/dmi/id/sys_vendor"), "Supermicro\n");
  std::string cpuinfo = ReadFile(root / "proc/cpuinfo");
  EXPECT_NE(cpuinfo.find("flags\t\t: "), std::string::npos);
  EXPECT_EQ(cpuinfo.find("hypervisor"), std::string::npos);
}

TEST_F(P2psimTest, SysrootIommuGroupsFollowAcs) {
  fs::path root = Sysroot(Write("iommu.json", kIommuTopology), "box");
  // No ACS on "plain": its GPUs, the nested switch and the GPU under that share one group.
  std::string plain = GroupOf(root, "0000:1a:00.0");
  EXPECT_EQ(GroupOf(root, "0000:1b:00.0"), plain);
  EXPECT_EQ(GroupOf(root, "0000:1c:00.0"), plain);
  EXPECT_EQ(GroupOf(root, Device(root, "0000:1c:00.0").parent_path().filename().string()), plain);
  // The "plain" bridge itself sits above the shared bus: its own group.
  std::string plain_bridge = Device(root, "0000:1a:00.0").parent_path().filename().string();
  EXPECT_NE(GroupOf(root, plain_bridge), plain);
  // ACS on "acs", and a GPU under the CPU: one group each.
  std::set<std::string> groups{plain, GroupOf(root, plain_bridge), GroupOf(root, "0000:3a:00.0"),
                               GroupOf(root, "0000:3b:00.0"), GroupOf(root, "0000:5a:00.0")};
  EXPECT_EQ(groups.size(), 5u);

  // The group lists its members, linking back to the device directories.
  fs::path members = root / "sys/kernel/iommu_groups" / plain / "devices";
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(members)) names.insert(e.path().filename().string());
  EXPECT_EQ(names.size(), 4u);
  EXPECT_TRUE(names.count("0000:1a:00.0") && names.count("0000:1b:00.0") && names.count("0000:1c:00.0"));
  EXPECT_EQ(fs::canonical(members / "0000:1a:00.0"), Device(root, "0000:1a:00.0"));
  EXPECT_EQ(ReadFile(root / "sys/kernel/iommu_groups" / plain / "type"), "DMA-FQ\n");
  EXPECT_TRUE(fs::is_directory(root / "sys/class/iommu/dmar0"));
  EXPECT_FALSE(fs::exists(root / "sys/class/iommu/ivhd0"));

  // passthrough: a guest.
  EXPECT_EQ(ReadFile(root / "sys/class/dmi/id/sys_vendor"), "QEMU\n");
  EXPECT_NE(ReadFile(root / "proc/cpuinfo").find(" hypervisor "), std::string::npos);
}

TEST_F(P2psimTest, SysrootIommuPassthroughModeStillHasGroups) {
  std::string text = kIommuTopology;
  text.replace(text.find("intel_iommu=on"), 14, "amd_iommu=on iommu=pt");
  fs::path root = Sysroot(Write("pt.json", text), "box");
  std::string g = GroupOf(root, "0000:3a:00.0");
  EXPECT_EQ(ReadFile(root / "sys/kernel/iommu_groups" / g / "type"), "identity\n");
  EXPECT_TRUE(fs::is_directory(root / "sys/class/iommu/ivhd0"));
  EXPECT_FALSE(fs::exists(root / "sys/class/iommu/dmar0"));
}

TEST_F(P2psimTest, SysrootRewritesADirectoryWithoutLeftovers) {
  std::string iommu = Write("iommu.json", kIommuTopology);
  Sysroot(iommu, "box");
  fs::path root = Sysroot(P2PSIM_DEMO_TOPOLOGY, "node0");
  EXPECT_TRUE(fs::is_empty(root / "sys/kernel/iommu_groups"));
  EXPECT_FALSE(fs::exists(root / "sys/bus/pci/devices/0000:1a:00.0"));
  EXPECT_FALSE(fs::exists(root / "sys/class/iommu/dmar0"));
  EXPECT_EQ(ReadFile(root / "etc/hostname"), "node0\n");
  root = Sysroot(P2PSIM_DEMO_TOPOLOGY, "node0");  // and again, over itself
  EXPECT_EQ(ReadFile(Device(root, "0000:9a:00.0") / "numa_node"), "1\n");
}

// AER totals of GPUs and switch ports in the kernel's aer_dev_* format; a switch's own link.
TEST_F(P2psimTest, SysrootAerAndSwitchLinks) {
  std::string topo = Write("aer.json", R"({"version": 1, "hosts": [{"name": "box",
    "switches": [{"id": "sw0", "parent": "cpu0", "aer": {"correctable": 7, "fatal": 2}, "pcie": {"gen": 4, "width": 8, "max_gen": 5}},
                 {"id": "sw1", "parent": "cpu0"}],
    "gpus": [{"index": 0, "bus_id": "0000:1a:00.0", "parent": "sw0", "aer": {"nonfatal": 3}},
             {"index": 1, "bus_id": "0000:2a:00.0", "parent": "sw1"}]}]})");
  fs::path root = Sysroot(topo, "box");
  fs::path gpu0 = Device(root, "0000:1a:00.0");
  fs::path sw0 = gpu0.parent_path();
  fs::path sw1 = Device(root, "0000:2a:00.0").parent_path();
  const std::string kUncorrectableTypes =
      "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\n"
      "ECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\n"
      "PoisonTLPBlocked 0\n";
  EXPECT_EQ(ReadFile(gpu0 / "aer_dev_correctable"),
            "RxErr 0\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 0\n");
  std::string nonfatal = kUncorrectableTypes;
  nonfatal.replace(nonfatal.find("CmpltTO 0"), 9, "CmpltTO 3");  // the lines add up to the total
  EXPECT_EQ(ReadFile(gpu0 / "aer_dev_nonfatal"), nonfatal + "TOTAL_ERR_NONFATAL 3\n");
  EXPECT_EQ(ReadFile(gpu0 / "aer_dev_fatal"), kUncorrectableTypes + "TOTAL_ERR_FATAL 0\n");
  EXPECT_NE(ReadFile(sw0 / "aer_dev_correctable").find("RxErr 7\n"), std::string::npos);
  EXPECT_NE(ReadFile(sw0 / "aer_dev_correctable").find("\nTOTAL_ERR_COR 7\n"), std::string::npos);
  EXPECT_NE(ReadFile(sw0 / "aer_dev_fatal").find("\nTOTAL_ERR_FATAL 2\n"), std::string::npos);
  EXPECT_EQ(ReadFile(sw0 / "current_link_width"), "8\n");
  EXPECT_EQ(ReadFile(sw0 / "current_link_speed"), "16.0 GT/s PCIe\n");
  EXPECT_EQ(ReadFile(sw0 / "max_link_speed"), "32.0 GT/s PCIe\n");
  EXPECT_EQ(ReadFile(sw1 / "current_link_width"), "16\n");  // no "pcie": the host's best, x16
  EXPECT_NE(ReadFile(sw1 / "aer_dev_nonfatal").find("\nTOTAL_ERR_NONFATAL 0\n"), std::string::npos);
}

TEST_F(P2psimTest, SysrootBadTopologyNamesFileAndField) {
  std::string bad = Write("bad.json", R"({"version": 1, "hosts": [{"name": "n", "cpus": [{"id": "cpu0"}], "gpus": [{"index": 0, "bus_id": "zz"}]}]})");
  Result r = RunP2psim({"sysroot", bad, "n", (tmp_ / "root").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hosts[0].gpus[0].bus_id"), std::string::npos) << r.err;
}

TEST_F(P2psimTest, SysrootUnknownHost) {
  Result r = RunP2psim({"sysroot", P2PSIM_DEMO_TOPOLOGY, "node9", (tmp_ / "root").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("node9"), std::string::npos) << r.err;
}

TEST_F(P2psimTest, LaunchOneHostPrefixesEachRank) {
  Result r = RunP2psim(LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:3",
                            {"sh", "-c", "echo r=$RANK l=$LOCAL_RANK w=$WORLD_SIZE h=$P2PSIM_HOST; "
                                         "test -d \"$P2PTRACE_SYSROOT/sys\""}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(SortedLines(r.out), (std::vector<std::string>{"[rank 0] r=0 l=0 w=3 h=node0",
                                                          "[rank 1] r=1 l=1 w=3 h=node0",
                                                          "[rank 2] r=2 l=2 w=3 h=node0"}));
}

TEST_F(P2psimTest, LaunchEnvironment) {
  std::string topo = fs::relative(P2PSIM_DEMO_TOPOLOGY).string();  // made absolute for the ranks
  Result r = RunP2psim(LaunchArgs(topo, "node0:1",
                            {"sh", "-c", "echo $LD_LIBRARY_PATH; echo $P2PTRACE_SYSROOT; echo $P2PSIM_TOPOLOGY; "
                                         "echo $MASTER_ADDR:$MASTER_PORT $GROUP_RANK $LOCAL_WORLD_SIZE"}),
                 {{"P2PSIM_LIB_DIR", "/opt/simlib"}, {"LD_LIBRARY_PATH", "/old/lib"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string ld, sysroot, topology, master;
  std::getline(lines, ld), std::getline(lines, sysroot), std::getline(lines, topology), std::getline(lines, master);
  EXPECT_EQ(ld, "[rank 0] /opt/simlib:/old/lib");
  EXPECT_EQ(sysroot, "[rank 0] " + (tmp_ / "run/sysroot/node0").string());
  ASSERT_EQ(topology.rfind("[rank 0] /", 0), 0u) << topology;  // absolute
  EXPECT_TRUE(fs::equivalent(topology.substr(9), P2PSIM_DEMO_TOPOLOGY)) << topology;
  EXPECT_EQ(master, "[rank 0] 127.0.0.1:29500 0 1");
  EXPECT_EQ(ReadFile(tmp_ / "run/sysroot/node0/etc/hostname"), "node0\n");
}

// Programs that find CUDA through RPATH (PyTorch's wheels) reach the sim only by LD_PRELOAD: the
// libraries present are appended in a fixed order after what was preloaded (a tracer stays first).
TEST_F(P2psimTest, LaunchPreloadsTheSimulatedLibrariesAfterATracer) {
  fs::path lib = tmp_ / "simlib";
  fs::create_directories(lib);
  std::string real = "/lib/x86_64-linux-gnu/libm.so.6";  // any loadable library stands in
  for (const char* name : {"libnccl.so.2", "libcudart.so.12"}) fs::copy_file(real, lib / name);
  Result r = RunP2psim(LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:1", {"sh", "-c", "echo $LD_PRELOAD"}),
                       {{"P2PSIM_LIB_DIR", lib.string()}, {"LD_PRELOAD", real}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] " + real + ":" + (lib / "libcudart.so.12").string() + ":" +
                       (lib / "libnccl.so.2").string() + "\n");
  r = RunP2psim(LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:1", {"sh", "-c", "echo \"[$LD_PRELOAD]\""}),
                {{"P2PSIM_LIB_DIR", "/opt/simlib"}});
  EXPECT_EQ(r.out, "[rank 0] []\n");
}

TEST_F(P2psimTest, LaunchTwoHostsNumbersRanksAcrossHosts) {
  Result r = RunP2psim(LaunchArgs(Write("two.json", kTwoHosts), "a:1,b:2",
                            {"sh", "-c", "echo $RANK $P2PSIM_HOST $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK "
                                         "$WORLD_SIZE $(cat $P2PTRACE_SYSROOT/etc/hostname)"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(SortedLines(r.out), (std::vector<std::string>{"[rank 0] 0 a 0 1 0 3 a",
                                                          "[rank 1] 1 b 0 2 1 3 b",
                                                          "[rank 2] 2 b 1 2 1 3 b"}));
}

TEST_F(P2psimTest, LaunchDefaultDirIsFreshUnderTmpdir) {
  std::vector<std::string> args{"launch", "--topology", P2PSIM_DEMO_TOPOLOGY, "--hosts", "node0:1", "--",
                                "sh", "-c", "echo $P2PTRACE_SYSROOT"};
  Result r = RunP2psim(args, {{"TMPDIR", tmp_.string()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string said = "p2psim: run directory ";
  ASSERT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  ASSERT_EQ(r.err.rfind(said, 0), 0u) << r.err;
  fs::path dir = r.err.substr(said.size(), r.err.size() - said.size() - 1);
  EXPECT_EQ(dir.parent_path(), tmp_);
  EXPECT_EQ(dir.filename().string().rfind("p2psim-", 0), 0u) << dir;
  EXPECT_EQ(r.out, "[rank 0] " + (dir / "sysroot/node0").string() + "\n");
  EXPECT_TRUE(fs::is_directory(dir / "sysroot/node0/sys"));
}

TEST_F(P2psimTest, LaunchExitsWithTheHighestExitCode) {
  Result r = RunP2psim(LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:3", {"sh", "-c", "[ $RANK = 1 ] && exit 3; exit $RANK"}));
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

TEST_F(P2psimTest, LaunchRankKilledBySignalGives128PlusSignal) {
  Result r = RunP2psim(LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:3", {"sh", "-c", "[ $RANK = 1 ] && kill -KILL $$; exit 5"}));
  EXPECT_EQ(r.exit_code, 137) << r.err;
}

TEST_F(P2psimTest, LaunchCommandNotFoundExits127) {
  Result r = RunP2psim(LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:2", {"p2psim-no-such-command", "x"}));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("[rank 0] p2psim: p2psim-no-such-command: command not found\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[rank 1] "), std::string::npos) << r.err;
}

TEST_F(P2psimTest, LaunchPrefixesStderrAndFlushesPartialLines) {
  Result r = RunP2psim(LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:1",
                            {"sh", "-c", "printf 'one\\ntwo'; printf 'e1\\ne2' >&2"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] one\n[rank 0] two\n");
  EXPECT_EQ(r.err, "[rank 0] e1\n[rank 0] e2\n");
}

TEST_F(P2psimTest, LaunchForwardsSigterm) {
  std::vector<std::string> argv{P2PSIM_BINARY};
  for (const std::string& a :
       LaunchArgs(P2PSIM_DEMO_TOPOLOGY, "node0:2",
                  {"sh", "-c", "trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 0.05; done"}))
    argv.push_back(a);
  Child p2psim(argv);
  p2psim.ReadUntil([](const std::string& out) {
    return out.find("[rank 0] ready") != std::string::npos && out.find("[rank 1] ready") != std::string::npos;
  });
  ASSERT_EQ(kill(p2psim.pid(), SIGTERM), 0);
  Result r = p2psim.Finish();
  EXPECT_EQ(r.exit_code, 7) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] term\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] term\n"), std::string::npos) << r.out;
}

TEST_F(P2psimTest, LaunchUsageErrorsExit2) {
  std::string topo = P2PSIM_DEMO_TOPOLOGY;
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"launch", "--topology", topo, "--hosts", "node0:2", "sh", "-c", "true"}, "missing --"},
           {{"launch", "--topology", topo, "--hosts", "node0:2", "--"}, "missing the command"},
           {{"launch", "--topology", topo, "--hosts", "node7:2", "--", "true"}, "no host \"node7\""},
           {{"launch", "--topology", topo, "--hosts", "node0:0", "--", "true"}, "at least 1 rank"},
           {{"launch", "--topology", topo, "--hosts", "node0", "--", "true"}, "is not HOST:N"},
           {{"launch", "--hosts", "node0:1", "--", "true"}, "missing --topology"},
           {{"launch", "--topology", topo, "--hosts", "node0:1", "--bogus", "--", "true"}, "unknown option"},
       }) {
    Result r = RunP2psim(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.says;
    EXPECT_EQ(r.err.rfind("p2psim: launch: ", 0), 0u) << r.err;
    std::string first = r.err.substr(0, r.err.find('\n'));
    EXPECT_NE(first.find(c.says), std::string::npos) << first;
    EXPECT_NE(r.err.find("usage: p2psim"), std::string::npos);
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(P2psimTest, LaunchBadTopologyExit2) {
  std::string bad = Write("bad.json", "{\"version\": 1, \"hosts\": []}");
  Result r = RunP2psim({"launch", "--topology", bad, "--hosts", "n:1", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "p2psim: " + bad + ": hosts: at least one host is required\n");
}

TEST_F(P2psimTest, HelpAndUnknownSubcommand) {
  for (const char* help : {"--help", "help"}) {
    Result r = RunP2psim({help});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("p2psim sysroot TOPOLOGY HOST DIR"), std::string::npos);
    EXPECT_NE(r.out.find("p2psim launch --topology"), std::string::npos);
    EXPECT_NE(r.out.find("dev_shm"), std::string::npos);
  }
  Result r = RunP2psim({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown subcommand \"frobnicate\""), std::string::npos);
  EXPECT_EQ(RunP2psim({}).exit_code, 2);
}

}  // namespace
