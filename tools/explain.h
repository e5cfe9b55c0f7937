// `p2ptrace explain FILE… [--json]` (DESIGN.md §7): raw NCCL_DEBUG=INFO logs → per communicator,
// which rank sits on which host and GPU, which transport NCCL chose between every pair of ranks,
// and NCCL's own lines that explain a fallback (refusals, environment). Each file's kind is told by
// its content; only NCCL logs are read for now (`nvidia-smi topo -m` comes later).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "core/nccl_log.h"
#include "nlohmann/json.hpp"
#include "tools/finding.h"

namespace p2ptrace::cli {

struct ExplainFile {
  std::string path;
  NcclLog log;
};

// Where a line came from, for evidence: "file:line".
struct SourceLine {
  std::string file;
  uint64_t line = 0;
  std::string text;
  NcclLogger logger;
  std::string kind;  // refusal kind, or "" for environment lines
};

struct ExplainPair {
  int src_rank = -1, dst_rank = -1;
  int transport_class = 0;              // the worst class NCCL used for this pair (the fallback shows)
  std::vector<std::string> transports;  // NCCL's texts, first seen first
  std::set<int> channels;
  size_t lines = 0;
};

struct ExplainRank {
  std::string file;
  RankIdentity id;
};

struct ExplainConnection {
  std::string file;
  std::string comm_id;  // of the logging rank's communicator, when the log says
  Connection c;
};

// Ranks of one size without a commId (NCCL < 2.16) are taken as one communicator; connections whose
// communicator the log does not tell form their own group.
struct Communicator {
  std::string key;    // "0x9ca7…" (commId), "nranks=8", or "" (unattributed)
  std::string file;   // for unattributed connections: the file they are in (one group per file)
  std::string label;  // a line for people
  std::vector<ExplainRank> ranks;
  std::vector<ExplainPair> pairs;
  size_t connection_lines = 0;
};

struct Explanation {
  std::vector<std::string> files;
  std::string nccl_version;            // the first file's; "" when no version line
  std::set<std::string> nccl_versions;  // all that were printed
  uint64_t lines = 0, nccl_lines = 0;
  std::vector<Communicator> communicators;
  std::vector<ExplainConnection> connections;
  std::vector<SourceLine> refusals;
  std::vector<SourceLine> env;  // every `X set by environment to Y` line
  size_t warnings = 0;
  std::vector<Finding> findings;
};

Explanation BuildExplanation(const std::vector<ExplainFile>& files);
std::string RenderExplainText(const Explanation& e);
nlohmann::json RenderExplainJson(const Explanation& e);

// Reads the files and prints the explanation; returns the exit code (0 ok, 2 nothing usable).
// Problems with a file go to `err`, one line each, naming the file.
int RunExplain(const std::vector<std::string>& paths, bool json, std::ostream& out, std::ostream& err);

}  // namespace p2ptrace::cli
