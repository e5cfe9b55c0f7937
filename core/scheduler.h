// Who started a process: the job id, rank and node that the batch scheduler or launcher put in its
// environment (SLURM, torchrun, Open MPI / PMIx, Kubernetes; PBS, LSF and Flux job ids too). Pure:
// reads through a lookup function, so the shim (its own environment, once at trace open) and the CLI
// (a trace's recorded environment) agree, and tests need no real environment.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace p2ptrace {

struct SchedulerIds {
  // Which launcher's variables were found, most specific first: "slurm", "kubernetes", "openmpi",
  // "pmix", "torchrun", "pbs", "lsf", "flux"; "" when none.
  std::string scheduler;
  std::string job_id;   // the batch job (SLURM_JOB_ID, …); "" unknown
  std::string step_id;  // SLURM_STEP_ID; "" unknown
  std::string run_id;   // torchrun's TORCHELASTIC_RUN_ID (its default "none" is not an id); "" unknown
  int rank = -1, local_rank = -1, world_size = -1;  // -1 unknown
  // The machine as the scheduler names it (SLURMD_NODENAME; Kubernetes' NODE_NAME from the downward
  // API's spec.nodeName); "" unknown: the kernel's hostname is then the only name.
  std::string node;
  std::string pod, pod_namespace;  // Kubernetes: POD_NAME (else HOSTNAME), POD_NAMESPACE; "" outside a pod
};

// `get` returns a variable's value or nullptr when unset; an empty value counts as unset.
SchedulerIds ReadSchedulerIds(const std::function<const char*(const char*)>& get);
// The same over recorded "NAME", "VALUE" pairs (a trace's environment block).
SchedulerIds ReadSchedulerIds(const std::vector<std::pair<std::string, std::string>>& env);

// The variables ReadSchedulerIds reads: what a trace's environment block must keep for them.
const std::vector<const char*>& SchedulerVariables();

}  // namespace p2ptrace
