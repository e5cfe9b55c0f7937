// `p2ptrace _nccl-rank`: doctor --test --nccl's worker, one process per GPU (tools/doctor/nccl_choice.h).
// Not for users: main.cc's table leaves it out of the help.
#include <string>

#include "CLI/CLI.hpp"
#include "tools/cli/commands.h"
#include "tools/doctor/nccl_choice.h"

namespace p2ptrace::cli {
namespace {

class NcclRankCommand : public Command {
 public:
  void Define(CLI::App& c) override {
    c.add_option("rank", rank_)->required();
    c.add_option("nranks", ranks_)->required();
    c.add_option("device", device_)->required();
    c.add_option("dir", dir_)->required();
    c.add_option("limit", limit_)->required();
  }
  int Run() override { return RunNcclRank(rank_, ranks_, device_, dir_, limit_); }

 private:
  int rank_ = 0, ranks_ = 0, device_ = 0;
  std::string dir_;
  double limit_ = 60;
};

}  // namespace

std::unique_ptr<Command> MakeNcclRankCommand() { return std::make_unique<NcclRankCommand>(); }

}  // namespace p2ptrace::cli
