// The identity files ranks exchange through the trace directory (shim/identity.h): what the shim
// writes reads back the same; anything else — control bytes, other characters, numbers out of range,
// cut lines — is rejected whole.
#include "shim/identity.h"

#include <gtest/gtest.h>

namespace {

using p2ptrace::shim::ParseIdentity;
using p2ptrace::shim::RankIdentity;
using p2ptrace::shim::SerializeIdentity;

RankIdentity Sample() {
  RankIdentity id;
  id.host = "node-7.cluster_a";
  id.boot_id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
  id.bus = "0000:2a:00.0";
  id.shm_dev = 27;
  id.shm_mb = 65536;
  id.rank = 3;
  id.pid = 4242;
  id.gpu = 5;
  return id;
}

TEST(Identity, WhatTheShimWritesReadsBackTheSame) {
  RankIdentity in = Sample(), out;
  ASSERT_TRUE(ParseIdentity(SerializeIdentity(in), &out));
  EXPECT_EQ(out.host, in.host);
  EXPECT_EQ(out.boot_id, in.boot_id);
  EXPECT_EQ(out.bus, in.bus);
  EXPECT_EQ(out.shm_dev, 27);
  EXPECT_EQ(out.shm_mb, 65536);
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.pid, 4242);
  EXPECT_EQ(out.gpu, 5);
  // Unknown keys (a newer shim's) are ignored; unset numbers keep their defaults.
  ASSERT_TRUE(ParseIdentity("host a\npid 7\nfuture_key anything\n", &out));
  EXPECT_EQ(out.host, "a");
  EXPECT_EQ(out.rank, -1);
}

TEST(Identity, AnythingElseIsRejectedWholeAndLeavesTheOutputAlone) {
  const std::string good = SerializeIdentity(Sample());
  auto with = [&](const std::string& key, const std::string& value) {
    std::string text = good;
    size_t at = text.find(key + " ");
    size_t eol = text.find('\n', at);
    return text.replace(at, eol - at, key + " " + value);
  };
  const std::string bad[] = {
      with("host", "\x1b]0;EVIL\x07"),       // a terminal title escape
      with("host", "node\x1b[31m"),          // colour
      with("host", "n\xc3\xa9ud"),           // non-ASCII
      with("host", "a b"),                   // a space
      with("host", ""),                      // empty
      with("host", std::string(256, 'a')),   // longer than any host name
      with("bus", "0000:2a:00.0\r"),         // a carriage return
      with("bus", "../../etc"),              // a path
      with("boot_id", "x\x7f"),              // DEL
      with("rank", "1x"),                    // trailing junk
      with("rank", "99999999999999999999"),  // out of range
      with("rank", "-2"),
      with("pid", "0"),
      with("pid", "-1"),
      with("shm_dev", "+1"),
      good.substr(0, good.size() - 1),       // the last line cut
      "host a\n",                            // no pid
      "pid 5\n",                             // no host
      "host a\npid 5\nno-space-line\n",
      std::string("host a\0b\npid 5\n", 15),  // a NUL
  };
  for (const std::string& text : bad) {
    RankIdentity out = Sample();
    out.host = "untouched";
    EXPECT_FALSE(ParseIdentity(text, &out)) << text;
    EXPECT_EQ(out.host, "untouched");
  }
}

}  // namespace
