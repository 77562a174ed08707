// The allowlist settings as serve reads them (egress_settings_from): every bad value named by
// its key, and the secrets (issue 34 §3): a secret file of ours that nobody else can read, a
// destination on the allow-list, https only with an operator's CA (`inject_tls_ca`, checked at
// config time), placeholders kept in the state directory across restarts and given to the
// sandboxes' environment.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/egress_host.hpp"
#include "sandboxd/core/egress_tls.hpp"

namespace sandboxd::testing {
namespace {

namespace fs = std::filesystem;
using core::ConfigError;
using core::egress_settings_from;

class EgressSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("egress-settings-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "state");
    fs::permissions(dir_, fs::perms::owner_all);
    fs::permissions(dir_ / "state", fs::perms::owner_all);
    secret_file_ = dir_ / "token";
    write(secret_file_, kSecret + "\n", 0600);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void write(const fs::path& path, const std::string& text, mode_t mode) {
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
  }

  // Backend options with network mode allowlist and `extra` inside the network object.
  std::string options(const std::string& extra) const {
    return R"({"environment": {"KEEP": "1"}, "network": {"mode": "allowlist",
      "allow_domains": ["api.example", "*.files.example"])" +
           (extra.empty() ? std::string() : ", " + extra) + "}}";
  }
  std::string secret(const std::string& inject, const std::string& file = "") const {
    return R"("secrets": [{"name": "TOKEN", "secret_file": ")" +
           (file.empty() ? secret_file_.string() : file) + R"(", "inject": )" + inject + "}]";
  }
  // The ConfigError's message for `json`, or "" when it is accepted.
  static std::string refusal(const std::string& json) {
    try {
      egress_settings_from(json, "sandbox.backend");
      return "";
    } catch (const ConfigError& e) {
      return e.what();
    }
  }

  const std::string kSecret = "s3cr3t-never-shown";
  fs::path dir_;
  fs::path secret_file_;
};

TEST_F(EgressSettingsTest, OnlyAllowlistModeHasSettingsAndBadValuesAreNamed) {
  EXPECT_FALSE(egress_settings_from(R"({"network": {"mode": "isolated"}})", "sandbox.backend"));
  EXPECT_FALSE(egress_settings_from(R"({"image": "x"})", "sandbox.backend"));
  const auto settings = egress_settings_from(options(""), "sandbox.backend");
  ASSERT_TRUE(settings);
  EXPECT_TRUE(settings->policy.prompt) << "DeerFlow's default approval";
  EXPECT_TRUE(settings->policy.allow.allows("a.files.example"));
  EXPECT_FALSE(settings->policy.allow.allows("files.example"));

  EXPECT_NE(refusal(options(R"("approval": "ask")")).find("sandbox.backend.network.approval"),
            std::string::npos);
  EXPECT_NE(refusal(options(R"("temporary_grant_ttl": 5)")).find("temporary_grant_ttl"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"network": {"mode": "allowlist", "allow_domains": ["ok.example", "*"]}})")
                .find("allow_domains[1]"),
            std::string::npos);
  EXPECT_NE(refusal(options(R"("test_only_upstreams": {"up.test": "10.0.0.5:80"})"))
                .find("loopback only"),
            std::string::npos)
      << "test upstreams are never anywhere but this host's loopback";
}

TEST_F(EgressSettingsTest, ASecretForAPlainHttpDestinationIsReadFromItsFile) {
  const auto settings = egress_settings_from(
      options(secret(
          R"({"host": "API.example", "header": "Authorization", "format": "Bearer {}", "scheme": "http"})")),
      "sandbox.backend");
  ASSERT_TRUE(settings);
  ASSERT_EQ(settings->policy.secrets.size(), 1u);
  const core::EgressSecret& got = settings->policy.secrets[0];
  EXPECT_EQ(got.name, "TOKEN");
  EXPECT_EQ(got.domain, "api.example");
  EXPECT_EQ(got.header, "Authorization");
  EXPECT_EQ(got.format, "Bearer {}");
  EXPECT_EQ(got.value, kSecret) << "its final newline dropped";
  EXPECT_EQ(got.placeholder, "") << "placeholders come from the state directory";
}

TEST_F(EgressSettingsTest, SecretsTheProxyCannotKeepAreRefusedWithoutShowingThem) {
  const std::string good_inject =
      R"({"host": "api.example", "header": "Authorization", "scheme": "http"})";
  // https (scheme not given, or given) without inject_tls_ca: the proxy cannot read the request.
  std::string why =
      refusal(options(secret(R"({"host": "api.example", "header": "Authorization"})")));
  EXPECT_NE(why.find("network.secrets[0].inject.scheme"), std::string::npos) << why;
  EXPECT_NE(why.find("inject_tls_ca"), std::string::npos) << why;
  EXPECT_NE(
      refusal(options(secret(
                  R"({"host": "api.example", "header": "Authorization", "scheme": "https"})")))
          .find("inject.scheme"),
      std::string::npos);
  EXPECT_NE(refusal(options(secret(
                        R"({"host": "api.example", "header": "Authorization", "scheme": "ftp"})")))
                .find("expected http or https, got \"ftp\""),
            std::string::npos);
  EXPECT_NE(refusal(options(R"("inject_tls_ca": "/etc/ca.pem")")).find("inject_tls_ca"),
            std::string::npos);
  // A destination that is not allowed, a header a secret cannot go into, a format without {}.
  EXPECT_NE(
      refusal(options(secret(
                  R"({"host": "elsewhere.example", "header": "Authorization", "scheme": "http"})")))
          .find("not in allow_domains"),
      std::string::npos);
  EXPECT_NE(
      refusal(options(secret(R"({"host": "api.example", "header": "Host", "scheme": "http"})")))
          .find("inject.header"),
      std::string::npos);
  EXPECT_NE(
      refusal(
          options(secret(
              R"({"host": "api.example", "header": "X-Key", "format": "Bearer", "scheme": "http"})")))
          .find("inject.format"),
      std::string::npos);

  // The file: readable by others, a link, missing, two lines. Named, never shown.
  ::chmod(secret_file_.c_str(), 0640);
  why = refusal(options(secret(good_inject)));
  EXPECT_NE(why.find("secrets[0].secret_file"), std::string::npos) << why;
  EXPECT_NE(why.find("chmod 600"), std::string::npos) << why;
  EXPECT_EQ(why.find(kSecret), std::string::npos) << why;
  ::chmod(secret_file_.c_str(), 0600);
  fs::create_symlink(secret_file_, dir_ / "link");
  why = refusal(options(secret(good_inject, (dir_ / "link").string())));
  EXPECT_NE(why.find("secret_file"), std::string::npos) << why;
  EXPECT_NE(why.find("refusing to follow the symbolic link"), std::string::npos) << why;
  why = refusal(options(secret(good_inject, (dir_ / "missing").string())));
  EXPECT_NE(why.find("missing"), std::string::npos) << why;
  write(dir_ / "two", "line one\nline two\n", 0600);
  why = refusal(options(secret(good_inject, (dir_ / "two").string())));
  EXPECT_NE(why.find("more than one line"), std::string::npos) << why;
  EXPECT_EQ(why.find("line one"), std::string::npos) << why;
  EXPECT_NE(refusal(options(secret(good_inject, "relative/token"))).find("absolute"),
            std::string::npos);
}

TEST_F(EgressSettingsTest, PlaceholdersAreKeptAcrossRestartsAndGoIntoTheEnvironment) {
  const std::string json = options(secret(
      R"({"host": "api.example", "header": "Authorization", "format": "Bearer {}", "scheme": "http"})"));
  auto first = egress_settings_from(json, "sandbox.backend");
  core::assign_secret_placeholders(*first, dir_ / "state");
  const std::string placeholder = first->policy.secrets[0].placeholder;
  EXPECT_EQ(placeholder.rfind("sandboxd-placeholder-", 0), 0u) << placeholder;
  EXPECT_EQ(placeholder.size(), std::string("sandboxd-placeholder-").size() + 32);

  const fs::path kept = dir_ / "state" / "egress-placeholders.json";
  struct stat st {};
  ASSERT_EQ(::stat(kept.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(kept);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find(kSecret), std::string::npos) << "only placeholders are kept";

  auto second = egress_settings_from(json, "sandbox.backend");
  core::assign_secret_placeholders(*second, dir_ / "state");
  EXPECT_EQ(second->policy.secrets[0].placeholder, placeholder)
      << "a restart gives sandboxes made before the same placeholder";

  const std::string with = core::with_secret_placeholders(json, *second, "sandbox.backend");
  EXPECT_NE(with.find("\"TOKEN\":\"" + placeholder + "\""), std::string::npos) << with;
  EXPECT_NE(with.find("\"KEEP\":\"1\""), std::string::npos) << with;
  EXPECT_EQ(with.find(kSecret), std::string::npos) << with;

  const std::string clash =
      R"({"environment": {"TOKEN": "mine"}, "network": {"mode": "allowlist",
    "allow_domains": ["api.example"], )" +
      secret(R"({"host": "api.example", "header": "X-Key", "scheme": "http"})") + "}}";
  auto clashing = egress_settings_from(clash, "sandbox.backend");
  core::assign_secret_placeholders(*clashing, dir_ / "state");
  try {
    core::with_secret_placeholders(clash, *clashing, "sandbox.backend");
    FAIL() << "an environment value of the secret's name was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sandbox.backend.environment.TOKEN"), std::string::npos)
        << e.what();
  }
}

// inject_tls_ca: a CA certificate and its key, the key ours and private; with it an https
// secret is accepted; every problem is named by its key, never showing the key.
TEST_F(EgressSettingsTest, AnHttpsSecretIsAcceptedWithAnOperatorsCaCheckedAtConfigTime) {
  const core::TlsKeyPair ca = core::make_certificate_authority("operator CA", 2);
  write(dir_ / "ca.pem", ca.certificate_pem, 0644);
  write(dir_ / "ca.key", ca.key_pem, 0600);
  write(dir_ / "roots.pem", ca.certificate_pem, 0644);
  const auto with_ca = [&](const std::string& certificate, const std::string& key) {
    return R"("inject_tls_ca": {"certificate_file": ")" + (dir_ / certificate).string() +
           R"(", "key_file": ")" + (dir_ / key).string() + R"("}, )" +
           secret(R"({"host": "api.example", "header": "Authorization"})");
  };
  const auto settings =
      egress_settings_from(options(with_ca("ca.pem", "ca.key") + R"(, "upstream_ca_file": ")" +
                                   (dir_ / "roots.pem").string() + "\""),
                           "sandbox.backend");
  ASSERT_TRUE(settings);
  ASSERT_TRUE(settings->policy.interception_authority);
  EXPECT_EQ(settings->policy.interception_authority->certificate_pem, ca.certificate_pem);
  EXPECT_EQ(settings->policy.upstream_roots_pem, ca.certificate_pem);
  ASSERT_EQ(settings->policy.secrets.size(), 1u);
  EXPECT_TRUE(settings->policy.secrets[0].https) << "scheme not given is https";

  // The key readable by others.
  write(dir_ / "open.key", ca.key_pem, 0644);
  std::string why = refusal(options(with_ca("ca.pem", "open.key")));
  EXPECT_NE(why.find("network.inject_tls_ca.key_file"), std::string::npos) << why;
  EXPECT_NE(why.find("chmod 600"), std::string::npos) << why;
  EXPECT_EQ(why.find("PRIVATE KEY"), std::string::npos) << "the key was shown: " << why;
  // A certificate that is not a CA's, and a key that is not the certificate's.
  const core::TlsKeyPair leaf = core::issue_server_certificate(ca, "api.example", 2);
  write(dir_ / "leaf.pem", leaf.certificate_pem, 0644);
  write(dir_ / "leaf.key", leaf.key_pem, 0600);
  why = refusal(options(with_ca("leaf.pem", "leaf.key")));
  EXPECT_NE(why.find("is not a CA certificate"), std::string::npos) << why;
  why = refusal(options(with_ca("ca.pem", "leaf.key")));
  EXPECT_NE(why.find("the key is not the key of"), std::string::npos) << why;
  EXPECT_EQ(why.find("PRIVATE KEY"), std::string::npos) << why;
  // A missing file, and roots that hold no certificate.
  why = refusal(options(with_ca("missing.pem", "ca.key")));
  EXPECT_NE(why.find("network.inject_tls_ca.certificate_file"), std::string::npos) << why;
  write(dir_ / "junk.pem", "not a certificate\n", 0644);
  why = refusal(options(with_ca("ca.pem", "ca.key") + R"(, "upstream_ca_file": ")" +
                        (dir_ / "junk.pem").string() + "\""));
  EXPECT_NE(why.find("network.upstream_ca_file"), std::string::npos) << why;
  EXPECT_NE(why.find("holds no PEM certificate"), std::string::npos) << why;
}

}  // namespace
}  // namespace sandboxd::testing
