// p2psim: the simulated node's command (DESIGN.md §9). `sysroot` writes a host's /proc and /sys
// facts for P2PTRACE_SYSROOT; `launch` runs ranks across simulated hosts like torchrun.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tests/sim/common/sim_topology.h"
#include "tests/sim/p2psim/launch.h"
#include "tests/sim/p2psim/sysroot.h"

namespace {

void PrintUsage(FILE* to) {
  std::fprintf(to,
      "usage: p2psim sysroot TOPOLOGY HOST DIR\n"
      "       p2psim launch --topology T --hosts H1:N1[,H2:N2...] [--dir D] -- CMD [ARG...]\n"
      "       p2psim help\n"
      "\n"
      "p2psim sysroot TOPOLOGY HOST DIR\n"
      "  Writes HOST's /proc and /sys facts from the topology file under DIR (created if missing;\n"
      "  rerunning rewrites it), for probes run with P2PTRACE_SYSROOT=DIR: proc/cmdline,\n"
      "  proc/sys/kernel/random/boot_id, proc/sys/kernel/hostname, etc/hostname, the PCI tree\n"
      "  (sys/devices/pci*, sys/bus/pci/devices/<bdf> links; vendor, device, class, numa_node,\n"
      "  link speed and width files), sys/kernel/iommu_groups, sys/class/iommu, the NVIDIA driver's\n"
      "  proc/driver/nvidia (version, params, gpus/<bdf>/information), and the VM markers\n"
      "  sys/class/dmi/id/sys_vendor (QEMU under passthrough or vgpu) and proc/cpuinfo's\n"
      "  \"hypervisor\" flag (x86). A directory cannot hold a tmpfs, so /dev/shm is described in\n"
      "  DIR/p2psim/dev_shm: \"size_mb <dev_shm_mb>\" and \"device <shm_device>\" lines.\n"
      "%s"
      "\n"
      "p2psim launch --topology T --hosts H1:N1[,H2:N2...] [--dir D] -- CMD [ARG...]\n"
      "  Starts N ranks on each simulated host, numbered across hosts in order (H1 gets 0..N1-1),\n"
      "  each with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (host index),\n"
      "  MASTER_ADDR=127.0.0.1, MASTER_PORT=29500, P2PSIM_HOST, P2PSIM_TOPOLOGY (absolute),\n"
      "  LD_LIBRARY_PATH with the simulated libraries first ($P2PSIM_LIB_DIR overrides where they\n"
      "  are), LD_PRELOAD ending with them (for programs that find CUDA through RPATH, like\n"
      "  PyTorch's wheels; what was preloaded before, such as p2ptrace's shim, stays first), and\n"
      "  P2PTRACE_SYSROOT=D/sysroot/<host>, written as `sysroot` does. D defaults to a\n"
      "  new $TMPDIR/p2psim-XXXXXX (or /tmp), printed on stderr and kept. Each line a rank prints\n"
      "  comes out on the same stream prefixed \"[rank N] \". SIGINT and SIGTERM are passed on to\n"
      "  the ranks (a terminal's ^C already reaches them). A command that is not found makes its\n"
      "  rank exit 127.\n"
      "  Exit status: 128+signal if a rank died of a signal (the first one reaped), else the\n"
      "  highest exit code of the ranks.\n"
      "\n"
      "p2psim exits 2 on a usage error, a bad topology file or an unknown host, 1 when it cannot\n"
      "write its files or start a rank.\n",
      p2psim::kSysrootRules);
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "p2psim: %s\n", message.c_str());
  PrintUsage(stderr);
  return 2;
}

bool WantsHelp(const std::vector<std::string>& args) {
  return args.size() == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help");
}

std::string HostNames(const p2psim::Topology& topo) {
  std::string names;
  for (const p2ptrace::Host& h : topo.hosts) names += (names.empty() ? "" : ", ") + h.name;
  return names;
}

int SysrootCommand(const std::vector<std::string>& args) {
  if (args.size() != 3) return UsageError("sysroot takes TOPOLOGY HOST DIR");
  p2psim::Topology topo;
  std::string error;
  if (!p2psim::LoadTopology(args[0], &topo, &error)) {
    std::fprintf(stderr, "p2psim: %s\n", error.c_str());
    return 2;
  }
  const p2ptrace::Host* host = topo.FindHost(args[1]);
  if (host == nullptr) {
    std::fprintf(stderr, "p2psim: %s: no host \"%s\" (hosts: %s)\n", args[0].c_str(), args[1].c_str(),
                 HostNames(topo).c_str());
    return 2;
  }
  if (!p2psim::WriteSysroot(topo, *host, args[2], &error)) {
    std::fprintf(stderr, "p2psim: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

int LaunchCommand(const std::vector<std::string>& args) {
  p2psim::LaunchOptions options;
  std::string error;
  if (!p2psim::ParseLaunchArgs(args, &options, &error)) return UsageError("launch: " + error);
  p2psim::Topology topo;
  if (!p2psim::LoadTopology(options.topology, &topo, &error)) {
    std::fprintf(stderr, "p2psim: %s\n", error.c_str());
    return 2;
  }
  for (const p2psim::HostRanks& hr : options.hosts)
    if (topo.FindHost(hr.host) == nullptr)
      return UsageError("launch: " + options.topology + ": no host \"" + hr.host + "\" (hosts: " +
                        HostNames(topo) + ")");
  std::fflush(stderr);  // the ranks' lines go straight to the file descriptors
  return p2psim::Launch(topo, options);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) return UsageError("missing a subcommand");
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (WantsHelp(args) || ((args[0] == "sysroot" || args[0] == "launch") && WantsHelp(rest))) {
      PrintUsage(stdout);
      return 0;
    }
    if (args[0] == "sysroot") return SysrootCommand(rest);
    if (args[0] == "launch") return LaunchCommand(rest);
    return UsageError("unknown subcommand \"" + args[0] + "\"");
  } catch (const std::exception& e) {  // allocation failure and the like
    std::fprintf(stderr, "p2psim: %s\n", e.what());
    return 1;
  }
}
