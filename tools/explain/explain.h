// `p2ptrace explain FILE… [--json]` (DESIGN.md §7): raw NCCL_DEBUG=INFO logs → per communicator,
// which rank sits on which host and GPU, which transport NCCL chose between every pair of ranks,
// and NCCL's own lines that explain a fallback (refusals, environment). `nvidia-smi topo -m` (and
// `topo -p2p r|w`) → the matrix and the predicted path of every GPU pair with its causes
// (core/predict.h); given both, the prediction is compared with what NCCL logged. Each file's kind
// is told by its content.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/nccl_failures.h"
#include "core/nccl_log.h"
#include "core/nccl_net.h"
#include "core/net_diagnosis.h"
#include "core/predict.h"
#include "core/topo_matrix.h"
#include "nlohmann/json.hpp"
#include "tools/common/finding.h"

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
  std::string Where() const;  // "file:line", for evidence
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
  std::string communicator;  // the key of its communicator's group (Communicator::key)
};

struct ExplainConnection {
  std::string file;
  std::string comm_id;       // of the logging rank's communicator, when the log says
  std::string communicator;  // the key of its communicator's group (Communicator::key); "" unattributed
  Connection c;
};

// Ranks of one size without a commId (NCCL < 2.16) are taken as one communicator; connections whose
// communicator the log does not tell form their own group.
struct Communicator {
  std::string key;    // "0x9ca7…" (commId), a split's "0x9ca7…/split1/color0", "nranks=8", or "" (unattributed)
  std::string file;   // for unattributed connections: the file they are in (one group per file)
  std::string label;  // a line for people
  std::vector<ExplainRank> ranks;
  std::vector<ExplainPair> pairs;
  size_t connection_lines = 0;
};

// One observed rank pair of the log against the prediction for its GPUs.
struct Comparison {
  int src_rank = -1, dst_rank = -1, a = -1, b = -1;  // a/b: the matrix's GPUs
  int observed = 0, predicted = 0;
  bool agrees = false;
  std::string communicator;
};

// What `explain` makes of `nvidia-smi topo` input (with the flags and what the logs tell).
struct TopoExplanation {
  std::string file, p2p_file;
  TopoMatrix matrix;
  std::optional<TopoMatrix> p2p;
  NodeFacts facts;
  Prediction prediction;
  std::vector<std::string> assumptions;  // the predictor's, plus how ranks were mapped to GPUs
  std::vector<Comparison> comparisons;
};

// One device of a `NET/… : Using` line (core/nccl_net.h), and who printed it where.
struct ExplainNetDevice {
  std::string file;
  uint64_t line = 0;
  NcclLogger logger;
  NetDevice device;
};

struct ExplainOptions {
  bool json = false;
  std::vector<std::string> env;  // NAME=VALUE
  std::string nccl_version, cpu_vendor, gpus;  // "" = not given
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
  size_t ambiguous = 0;  // connection lines that fit several communicators of their process equally
  std::vector<NcclFailure> failures;  // NCCL's WARN lines and failed return codes, by cause (evidence names the file)
  std::vector<ExplainNetDevice> net_devices;  // the networks' devices, as each host printed them
  std::vector<NetFinding> net;  // degraded NET connections by host, each with its cause
  std::vector<Finding> findings;
  std::optional<TopoExplanation> topo;
};

// "GPU2-GPU5": how explain names a pair of the matrix's GPUs.
std::string GpuPairName(int a, int b);

// The model (explain.cc), its text (text.cc) and its JSON (json.cc).
Explanation BuildExplanation(const std::vector<ExplainFile>& files);
// Predicts from the topology (facts already filled from the matrix and the flags), compares with
// the logs in `e`, and adds the findings.
void AddTopology(Explanation& e, TopoExplanation topo);
std::string RenderExplainText(const Explanation& e);
nlohmann::json RenderExplainJson(const Explanation& e);

// Reads the files and prints the explanation; returns the exit code (0 ok, 2 nothing usable or a
// bad option). Problems with a file or an option go to `err`, one line each, naming it.
int RunExplain(const std::vector<std::string>& paths, const ExplainOptions& options, std::ostream& out,
               std::ostream& err);

}  // namespace p2ptrace::cli
