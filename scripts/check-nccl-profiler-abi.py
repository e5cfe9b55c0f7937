#!/usr/bin/env python3
"""Checks shim/interpose/nccl_profiler_abi.h field by field against NCCL's own profiler headers.

NCCL's profiler headers ship in no package this project can install (its wheels carry nccl.h
only), so the check runs by hand whenever NCCL adds a version: point it at an NCCL source tree
(git clone https://github.com/NVIDIA/nccl; any tag from 2.26.2, whose headers are
src/include/plugin/profiler/profiler_vN.h). It compiles one translation unit that includes both
and static_asserts every field's offset and size, the descriptor and table sizes, and the event
and state values, for each version the tree has.

  scripts/check-nccl-profiler-abi.py NCCL_SOURCE_DIR [--cxx c++]
Exit 0: all equal; 1: a difference (the compiler names the field); 2: bad usage.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

fields = {
 'v1': ('ncclProfilerEventDescr_v1_t', [('type','type'),('parentObj','parent'),('rank','rank'),
   ('coll.name','coll.name'),('coll.commHash','coll.comm_hash'),('coll.seqNumber','coll.seq'),('coll.func','coll.func'),('coll.sendBuff','coll.send_buff'),('coll.recvBuff','coll.recv_buff'),('coll.count','coll.count'),('coll.root','coll.root'),('coll.datatype','coll.datatype'),('coll.op','coll.op'),('coll.trafficBytes','coll.traffic_bytes'),('coll.nMaxChannels','coll.max_channels'),('coll.nWarps','coll.warps'),('coll.algo','coll.algo'),('coll.proto','coll.proto'),('coll.isCollnet','coll.is_collnet'),('coll.isNvls','coll.is_nvls'),
   ('p2p.name','p2p.name'),('p2p.commHash','p2p.comm_hash'),('p2p.func','p2p.func'),('p2p.buff','p2p.buff'),('p2p.datatype','p2p.datatype'),('p2p.count','p2p.count'),('p2p.peer','p2p.peer'),
   ('proxyOp.pid','proxy_op.pid'),('proxyOp.channelId','proxy_op.channel'),('proxyOp.peer','proxy_op.peer'),('proxyOp.nSteps','proxy_op.steps'),('proxyOp.chunkSize','proxy_op.chunk_size'),('proxyOp.isSend','proxy_op.is_send'),('proxyStep.step','proxy_step.step')]),
 'v2': ('ncclProfilerEventDescr_v2_t', [('coll.name','coll.name'),('coll.commHash','coll.comm_hash'),('coll.seqNumber','coll.seq'),('coll.func','coll.func'),('coll.sendBuff','coll.send_buff'),('coll.recvBuff','coll.recv_buff'),('coll.count','coll.count'),('coll.root','coll.root'),('coll.datatype','coll.datatype'),('coll.trafficBytes','coll.traffic_bytes'),('coll.nMaxChannels','coll.max_channels'),('coll.nWarps','coll.warps'),('coll.algo','coll.algo'),('coll.proto','coll.proto'),
   ('p2p.name','p2p.name'),('p2p.commHash','p2p.comm_hash'),('p2p.func','p2p.func'),('p2p.buff','p2p.buff'),('p2p.datatype','p2p.datatype'),('p2p.count','p2p.count'),('p2p.peer','p2p.peer'),('proxyOp.isSend','proxy_op.is_send')]),
 'v3': ('ncclProfilerEventDescr_v3_t', [('coll.name','coll.name'),('coll.seqNumber','coll.seq'),('coll.func','coll.func'),('coll.count','coll.count'),('coll.root','coll.root'),('coll.datatype','coll.datatype'),('coll.nMaxChannels','coll.max_channels'),('coll.nWarps','coll.warps'),('coll.algo','coll.algo'),('coll.proto','coll.proto'),
   ('p2p.peer','p2p.peer'),('p2p.count','p2p.count'),('kernelCh.channelId','kernel_ch.channel'),('netPlugin.id','net_plugin.id'),('netPlugin.data','net_plugin.data')]),
 'v4': ('ncclProfilerEventDescr_v4_t', [('type','type'),('rank','rank'),('coll.seqNumber','coll.seq'),('coll.func','coll.func'),('coll.sendBuff','coll.send_buff'),('coll.recvBuff','coll.recv_buff'),('coll.count','coll.count'),('coll.root','coll.root'),('coll.datatype','coll.datatype'),('coll.nChannels','coll.channels'),('coll.nWarps','coll.warps'),('coll.algo','coll.algo'),('coll.proto','coll.proto'),
   ('p2p.func','p2p.func'),('p2p.buff','p2p.buff'),('p2p.datatype','p2p.datatype'),('p2p.count','p2p.count'),('p2p.peer','p2p.peer'),('p2p.nChannels','p2p.channels'),('kernelCh.channelId','kernel_ch.channel'),('kernelCh.pTimer','kernel_ch.timer'),('netPlugin.data','net_plugin.data')]),
}
common5 = [('type','type'),('parentObj','parent'),('rank','rank'),('groupApi.graphCaptured','group_api.graph_captured'),('groupApi.groupDepth','group_api.depth'),
   ('collApi.func','coll_api.func'),('collApi.count','coll_api.count'),('collApi.datatype','coll_api.datatype'),('collApi.root','coll_api.root'),('collApi.stream','coll_api.stream'),('collApi.graphCaptured','coll_api.graph_captured'),
   ('p2pApi.func','p2p_api.func'),('p2pApi.count','p2p_api.count'),('p2pApi.datatype','p2p_api.datatype'),('p2pApi.stream','p2p_api.stream'),('p2pApi.graphCaptured','p2p_api.graph_captured'),('kernelLaunch.stream','kernel_launch.stream'),
   ('coll.seqNumber','coll.seq'),('coll.func','coll.func'),('coll.count','coll.count'),('coll.nChannels','coll.channels'),('coll.algo','coll.algo'),('coll.proto','coll.proto'),('coll.parentGroup','coll.parent_group'),
   ('p2p.func','p2p.func'),('p2p.buff','p2p.buff'),('p2p.datatype','p2p.datatype'),('p2p.count','p2p.count'),('p2p.peer','p2p.peer'),('p2p.nChannels','p2p.channels'),('p2p.parentGroup','p2p.parent_group'),
   ('proxyOp.peer','proxy_op.peer'),('proxyOp.isSend','proxy_op.is_send'),('kernelCh.channelId','kernel_ch.channel'),('kernelCh.pTimer','kernel_ch.timer'),('netPlugin.data','net_plugin.data')]
ce6 = [('ceColl.seqNumber','ce_coll.seq'),('ceColl.datatype','ce_coll.datatype'),('ceColl.syncStrategy','ce_coll.sync_strategy'),('ceColl.intraBatchSync','ce_coll.intra_batch_sync'),('ceColl.batchSize','ce_coll.batch_size'),('ceColl.numBatches','ce_coll.batches'),('ceColl.ceSeqNum','ce_coll.ce_seq'),('ceColl.stream','ce_coll.stream'),
   ('ceCollSync.isComplete','ce_sync.complete'),('ceCollSync.nRanks','ce_sync.nranks'),('ceCollBatch.numOps','ce_batch.ops'),('ceCollBatch.totalBytes','ce_batch.total_bytes'),('ceCollBatch.useIntraSync','ce_batch.intra_sync')]
fields['v5'] = ('ncclProfilerEventDescr_v5_t', common5)
fields['v6'] = ('ncclProfilerEventDescr_v6_t', common5 + ce6)
fields['v7'] = ('ncclProfilerEventDescr_v7_t', common5 + ce6 + [('collApi.userTag','coll_api.user_tag'),('p2pApi.userTag','p2p_api.user_tag'),('coll.kernelVariant','coll.kernel_variant'),('coll.isSymColl','coll.is_sym_coll'),('coll.userTag','coll.user_tag'),('p2p.userTag','p2p.user_tag'),('ceColl.userTag','ce_coll.user_tag'),('kernelPhase.channelId','kernel_phase.channel'),('kernelPhase.phaseId','kernel_phase.phase'),('kernelPhase.phaseName','kernel_phase.phase_name'),('kernelPhase.pTimer','kernel_phase.timer')])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nccl_source", help="an NCCL source tree (tag 2.26.2 or newer)")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    args = ap.parse_args()
    inc = os.path.join(args.nccl_source, "src", "include", "plugin")
    if not os.path.isfile(os.path.join(inc, "nccl_profiler.h")):
        print(f"no src/include/plugin/nccl_profiler.h under {args.nccl_source}: not an NCCL tree from 2.26.2 on")
        return 2
    have = [v for v in fields if os.path.isfile(os.path.join(inc, "profiler", f"profiler_{v}.h"))]
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "os.h"), "w").write("#include <sys/types.h>\ntypedef pid_t ncclPid_t;\n")
        out = ["#include <cstddef>", "#include <cstdint>", "#include <nccl.h>",
               "typedef void (*ncclDebugLogger_t)(int, unsigned long, const char*, int, const char*, ...);",
               '#include "nccl_profiler.h"']
        out += ['#include "profiler/profiler_%s.h"' % v for v in have if v == "v7"]
        out += ['#include "shim/interpose/nccl_profiler_abi.h"', "namespace np = p2ptrace::nccl_profiler;"]
        n = 0
        for v in have:
            theirs, fl = fields[v]
            out.append(f'static_assert(sizeof({theirs}) == sizeof(np::{v}::Descr), "{v} size");')
            for a, b in fl:
                out.append(f"static_assert(offsetof({theirs}, {a}) == offsetof(np::{v}::Descr, {b}) && "
                           f"sizeof((({theirs}*)0)->{a}) == sizeof(((np::{v}::Descr*)0)->{b}), \"{v} {a}\");")
                n += 1
            out.append(f"static_assert(sizeof(ncclProfiler_{v}_t) == sizeof(np::Plugin{v.upper()}), \"table {v}\");")
        out.append("int main() { return 0; }")
        src = os.path.join(tmp, "check.cc")
        open(src, "w").write("\n".join(out) + "\n")
        cmd = [args.cxx, "-std=c++20", "-fsyntax-only", "-Wno-invalid-offsetof", "-I" + tmp, "-I" + inc,
               "-I" + ROOT, "-I" + os.path.join(ROOT, "include"), "-isystem", "/usr/local/cuda/include", src]
        r = subprocess.run(cmd)
        if r.returncode != 0:
            print("nccl_profiler_abi.h differs from NCCL's headers (above)")
            return 1
        print(f"versions {', '.join(have)}: {n} fields, sizes and tables equal to NCCL's")
        return 0


if __name__ == "__main__":
    sys.exit(main())
