// The record that tells a set's members which shared-memory segment to map
// ("ok <name> <bytes>"): what set rank 0 writes reads back, and anything
// else is refused with a message that says what is wrong.
#include <gtest/gtest.h>

#include <string>

#include "hora/errors.h"
#include "transport/shm/segment.h"

namespace hora::shm {
namespace {

std::string refusal(const std::string& text) {
  try {
    parse_segment_record(text);
  } catch (const Internal& e) {
    return e.what();
  }
  return "accepted";
}

TEST(SegmentRecord, WhatIsWrittenReadsBack) {
  const SegmentRecord record{random_segment_name(), 123456789};
  const SegmentRecord again = parse_segment_record(format_segment_record(record));
  EXPECT_EQ(again.name, record.name);
  EXPECT_EQ(again.total_bytes, record.total_bytes);
  EXPECT_EQ(parse_segment_record(format_segment_record({record.name, UINT64_MAX})).total_bytes, UINT64_MAX);
}

TEST(SegmentRecord, AnythingElseIsRefusedNamingTheFault) {
  const std::string name = random_segment_name();
  const std::string ok = "ok " + name + " ";
  EXPECT_NE(refusal(name + " 4096").find("does not start with 'ok '"), std::string::npos);
  EXPECT_NE(refusal("ok " + name).find("no size after the name"), std::string::npos);
  EXPECT_NE(refusal("ok /etc/passwd 4096").find("not a segment name of this user"), std::string::npos);
  for (const std::string size : {"", "-1", "+5", " 5", "5 ", "0", "012", "4096x", "1e6"})
    EXPECT_NE(refusal(ok + size).find("the size is not a decimal number"), std::string::npos) << "'" << size << "'";
  EXPECT_NE(refusal(ok + "18446744073709551616").find("exceeds 2^64-1"), std::string::npos);
  EXPECT_NE(refusal(ok + "99999999999999999999").find("exceeds 2^64-1"), std::string::npos);
  EXPECT_NE(refusal(ok + "4096").find("accepted"), std::string::npos);
  EXPECT_NE(refusal("ok x 1").find("malformed segment record 'ok x 1'"), std::string::npos);
}

}  // namespace
}  // namespace hora::shm
