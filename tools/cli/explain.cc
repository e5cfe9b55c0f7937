// `p2ptrace explain FILE…`: pasted NCCL logs and `nvidia-smi topo -m` explained (tools/explain/).
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/cli/commands.h"
#include "tools/explain/explain.h"

namespace p2ptrace::cli {
namespace {

class ExplainCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("FILE", files_, "NCCL logs (NCCL_DEBUG=INFO output, any NCCL 2.x), `nvidia-smi topo -m` and "
                 "`topo -p2p r|w` output; each file's kind is told by its content")->required();
    c.add_flag("--json", o_.json, "print the explanation as JSON (DESIGN.md §7 schema)");
    c.add_option("--env", o_.env, "NAME=VALUE the job ran with (repeatable), e.g. NCCL_P2P_LEVEL=SYS");
    c.add_option("--nccl-version", o_.nccl_version, "the job's NCCL (default: the log's, else the newest rules)");
    c.add_option("--cpu-vendor", o_.cpu_vendor, "intel, intel-bdw (Broadwell or older), amd, arm");
    c.add_option("--gpus", o_.gpus, "the communicator's GPUs as the matrix numbers them, e.g. 0,1 "
                 "(as CUDA_VISIBLE_DEVICES; default: all)");
  }
  int Run() override { return RunExplain(files_, o_, std::cout, std::cerr); }

 private:
  std::vector<std::string> files_;
  ExplainOptions o_;
};

}  // namespace

std::unique_ptr<Command> MakeExplainCommand() { return std::make_unique<ExplainCommand>(); }

}  // namespace p2ptrace::cli
