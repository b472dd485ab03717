// SHA-256 and HMAC-SHA256 against the published vectors (FIPS 180-4 examples, RFC 4231), and the job
// secret's sources: the variable, the file and its permission check, and the refusals.
#include "common/job_secret.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "common/errors.h"
#include "common/knobs.h"
#include "tests/common/scoped_env.h"

namespace fsdp {
namespace {

std::string hex_of(const Digest& d) { return to_hex(std::string_view(reinterpret_cast<const char*>(d.data()), d.size())); }

std::string unhex(const std::string& hex) {
  std::string out;
  EXPECT_TRUE(from_hex(hex, &out)) << hex;
  return out;
}

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(hex_of(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex_of(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecewiseUpdatesMatchOneShot) {
  const std::string text(300, 'x');
  for (size_t cut : {0, 1, 55, 56, 63, 64, 65, 128, 299}) {
    Sha256 h;
    h.update(std::string_view(text).substr(0, cut));
    h.update(std::string_view(text).substr(cut));
    EXPECT_EQ(h.finish(), sha256(text)) << "cut at " << cut;
  }
}

// RFC 4231 test cases 1, 2, 3, 4, 6 and 7 (5 truncates the output, which this API does not).
TEST(HmacSha256, Rfc4231Vectors) {
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex_of(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(hex_of(hmac_sha256(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(131, '\xaa'),
                               "This is a test using a larger than block-size key and a larger than block-size data. "
                               "The key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, ConstantTimeCompareSeesEveryByte) {
  const Digest a = sha256("a");
  for (size_t i = 0; i < a.size(); ++i) {
    Digest b = a;
    b[i] ^= 1;
    EXPECT_FALSE(equal_constant_time(a, b)) << "byte " << i;
  }
  EXPECT_TRUE(equal_constant_time(a, sha256("a")));
}

TEST(AuthProof, LabelsAndTranscriptsSeparateProofs) {
  const std::string key = "0123456789abcdef";
  EXPECT_NE(auth_proof(key, "fsdp-store client", "n"), auth_proof(key, "fsdp-store server", "n"));
  EXPECT_NE(auth_proof(key, "fsdp-store client", "n1"), auth_proof(key, "fsdp-store client", "n2"));
  EXPECT_NE(auth_proof(key, "ab", "c"), auth_proof(key, "a", "bc"));  // the separator keeps fields apart
  EXPECT_NE(auth_proof(key, "l", "n"), auth_proof("", "l", "n"));
}

TEST(Hex, RoundTripsAndRefusesGarbage) {
  const std::string bytes = random_bytes(32);
  EXPECT_EQ(bytes.size(), 32u);
  std::string back;
  ASSERT_TRUE(from_hex(to_hex(bytes), &back));
  EXPECT_EQ(back, bytes);
  EXPECT_FALSE(from_hex("abc", &back));
  EXPECT_FALSE(from_hex("zz", &back));
  EXPECT_NE(random_bytes(16), random_bytes(16));
}

using testing::ScopedEnv;

std::string write_secret_file(const std::string& text, mode_t mode) {
  char path[] = "/tmp/fsdp-secret-XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  ::chmod(path, mode);
  return path;
}

TEST(JobSecret, NoneConfiguredIsEmpty) {
  ScopedEnv a("FSDP_JOB_SECRET", nullptr), b("FSDP_JOB_SECRET_FILE", nullptr);
  EXPECT_TRUE(job_secret_from_env().empty());
}

TEST(JobSecret, FromTheVariable) {
  const std::string hex = to_hex(random_bytes(32));
  ScopedEnv a("FSDP_JOB_SECRET", hex.c_str()), b("FSDP_JOB_SECRET_FILE", nullptr);
  const JobSecret s = job_secret_from_env();
  EXPECT_EQ(to_hex(s.key), hex);
  EXPECT_EQ(s.source, "FSDP_JOB_SECRET");
}

TEST(JobSecret, BadVariablesAreRefusedWithoutEchoingThem) {
  ScopedEnv b("FSDP_JOB_SECRET_FILE", nullptr);
  {
    ScopedEnv a("FSDP_JOB_SECRET", "not-hex-at-all-but-long-enough-to-be-a-secret");
    try {
      job_secret_from_env();
      FAIL() << "accepted a non-hex secret";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("FSDP_JOB_SECRET is not a hex string"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("long-enough"), std::string::npos) << "the message repeats the value";
    }
  }
  ScopedEnv a("FSDP_JOB_SECRET", "00112233");
  EXPECT_THROW(job_secret_from_env(), InvalidArgument);  // 4 bytes: under kMinSecretBytes
}

TEST(JobSecret, FromAnOwnerOnlyFile) {
  const std::string hex = to_hex(random_bytes(32));
  const std::string path = write_secret_file(hex + "\n", 0600);
  ScopedEnv a("FSDP_JOB_SECRET", nullptr), b("FSDP_JOB_SECRET_FILE", path.c_str());
  const JobSecret s = job_secret_from_env();
  EXPECT_EQ(to_hex(s.key), hex);
  EXPECT_NE(s.source.find(path), std::string::npos);
  ::unlink(path.c_str());
}

TEST(JobSecret, FilesOthersMayReadAreRefused) {
  const std::string path = write_secret_file(to_hex(random_bytes(32)), 0644);
  ScopedEnv a("FSDP_JOB_SECRET", nullptr), b("FSDP_JOB_SECRET_FILE", path.c_str());
  try {
    job_secret_from_env();
    FAIL() << "accepted a secret file of mode 644";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("mode 644"), std::string::npos) << what;
    EXPECT_NE(what.find("chmod 600"), std::string::npos) << what;
  }
  ::chmod(path.c_str(), 0640);
  EXPECT_THROW(job_secret_from_env(), InvalidArgument);
  ::unlink(path.c_str());
  EXPECT_THROW(job_secret_from_env(), InvalidArgument);  // missing file
}

TEST(JobSecret, BothSourcesAtOnceAreRefused) {
  const std::string path = write_secret_file(to_hex(random_bytes(32)), 0600);
  const std::string hex = to_hex(random_bytes(32));
  ScopedEnv a("FSDP_JOB_SECRET", hex.c_str()), b("FSDP_JOB_SECRET_FILE", path.c_str());
  EXPECT_THROW(job_secret_from_env(), InvalidArgument);
  ::unlink(path.c_str());
}

TEST(JobSecret, ListingsHideTheSecret) {
  const std::string hex = to_hex(random_bytes(32));
  ScopedEnv a("FSDP_JOB_SECRET", hex.c_str());
  const std::string listing = knobs::describe_knobs();
  EXPECT_EQ(listing.find(hex), std::string::npos);
  EXPECT_NE(listing.find("FSDP_JOB_SECRET=(set, hidden)"), std::string::npos) << listing;
}

TEST(JobSecret, GeneratedSecretsAreFreshAndLongEnough) {
  const JobSecret a = generate_job_secret(), b = generate_job_secret();
  EXPECT_EQ(a.key.size(), kGeneratedSecretBytes);
  EXPECT_NE(a.key, b.key);
}

}  // namespace
}  // namespace fsdp
