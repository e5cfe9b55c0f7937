// libFuzzer target for the `nvidia-smi topo` parser (core/topo_matrix): arbitrary bytes must give a
// clean error or matrices whose shapes hold, and the predictor must take any parsed matrix.
// Built only with clang (tests/CMakeLists.txt); `ctest -R fuzz.topo_matrix` runs it for a few
// seconds over tests/fixtures/topo.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "core/predict.h"
#include "core/topo_matrix.h"

namespace {

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = p2ptrace::ParseTopoText(text);
  if (!parsed.ok()) {
    Require(!parsed.error().message.empty());
    return 0;
  }
  Require(!parsed->matrices.empty());
  for (const p2ptrace::TopoMatrix& m : parsed->matrices) {
    Require(m.devices() > 0 && m.cells.size() == m.devices() && m.affinity.size() == m.gpus.size());
    for (const auto& row : m.cells) Require(row.size() == m.devices());
    Require(m.first_line >= 1);
    for (int a : m.gpus)
      for (int b : m.gpus) (void)m.Cell(a, b);
  }
  if (const p2ptrace::TopoMatrix* links = parsed->Links(); links != nullptr && links->gpus.size() <= 16) {
    p2ptrace::NodeFacts facts = p2ptrace::FactsFromTopo(*links, parsed->P2p(""));
    p2ptrace::Prediction p = p2ptrace::Predict(facts);
    // Each GPU once: the predictor pairs distinct GPUs (a damaged header may name one twice).
    std::set<int> distinct(links->gpus.begin(), links->gpus.end());
    size_t k = distinct.size();
    Require(p.pairs.size() == k * (k - 1) / 2);
    for (const auto& pair : p.pairs) Require(!pair.fallback || !pair.causes.empty());
  }
  return 0;
}
