#include "kube_credentials.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "sandboxd/redact.hpp"

namespace sandboxd::kubernetes {
namespace {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + what + " " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

// base64 (kubeconfig's *-data fields) without a dependency beyond the standard library.
std::string base64_decode(const std::string& in, const std::string& what) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int value = 0, bits = -8;
  for (const char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    const auto at = alphabet.find(c);
    if (at == std::string::npos) throw std::runtime_error(what + " is not base64");
    value = (value << 6) + static_cast<int>(at);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((value >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

// A relative file in a kubeconfig is relative to the kubeconfig's own directory.
std::string beside(const std::string& kubeconfig, const std::string& file) {
  if (file.empty() || file.front() == '/') return file;
  return (std::filesystem::path(kubeconfig).parent_path() / file).string();
}

YAML::Node named(const YAML::Node& list, const std::string& name, const std::string& what,
                 const std::string& where) {
  if (list && list.IsSequence()) {
    for (const auto& item : list) {
      if (item["name"] && item["name"].as<std::string>() == name) return item[what];
    }
  }
  throw std::runtime_error(where + ": no " + what + " named '" + name + "'");
}

std::string text_of(const YAML::Node& node, const char* key) {
  return node && node[key] ? node[key].as<std::string>() : std::string();
}

}  // namespace

void KubeCredentials::apply_to(http::Request& request) const {
  request.ca_file = ca_file;
  request.ca_pem = ca_pem;
  request.client_cert_file = client_cert_file;
  request.client_cert_pem = client_cert_pem;
  request.client_key_file = client_key_file;
  request.client_key_pem = client_key_pem;
  request.insecure_skip_tls_verify = insecure_skip_tls_verify;
  const std::string bearer =
      token_file.empty() ? token : trimmed(read_file(token_file, "the service-account token"));
  if (!bearer.empty()) request.headers.push_back("Authorization: Bearer " + bearer);
}

KubeCredentials in_cluster_credentials(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port) {
    throw std::runtime_error(
        "not inside a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
        "(give kubeconfig to reach a cluster from outside)");
  }
  KubeCredentials out;
  const std::string h = host;
  out.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  out.source = "in-cluster service account (" + root + ")";
  out.token_file = root + "/token";
  out.ca_file = root + "/ca.crt";
  for (const std::string& file : {out.token_file, out.ca_file}) {
    if (!std::filesystem::exists(file))
      throw std::runtime_error("in-cluster: " + file + " is missing");
  }
  if (std::filesystem::exists(root + "/namespace")) {
    out.namespace_ = trimmed(read_file(root + "/namespace", "the service account's namespace"));
  }
  return out;
}

KubeCredentials kubeconfig_credentials(const std::string& path,
                                       const std::optional<std::string>& context) {
  YAML::Node config;
  try {
    config = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::runtime_error("cannot read kubeconfig " + path);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("kubeconfig " + path + " is not valid YAML: " + e.what());
  }
  try {
    const std::string context_name = context ? *context : text_of(config, "current-context");
    if (context_name.empty()) {
      throw std::runtime_error("kubeconfig " + path +
                               " names no current-context; give the backend's kubeconfig_context");
    }
    const std::string where = "kubeconfig " + path;
    const YAML::Node ctx = named(config["contexts"], context_name, "context", where);
    const std::string cluster_name = text_of(ctx, "cluster");
    const std::string user_name = text_of(ctx, "user");
    const YAML::Node cluster = named(config["clusters"], cluster_name, "cluster", where);
    KubeCredentials out;
    out.source = where + " (context " + context_name + ")";
    out.namespace_ = text_of(ctx, "namespace");
    out.server = text_of(cluster, "server");
    while (!out.server.empty() && out.server.back() == '/') out.server.pop_back();
    if (!http::is_http_url(out.server)) {
      throw std::runtime_error(where + ": cluster '" + cluster_name +
                               "' has no http(s) server (got '" + redacted_url(out.server) + "')");
    }
    out.ca_file = beside(path, text_of(cluster, "certificate-authority"));
    if (cluster["certificate-authority-data"]) {
      out.ca_pem = base64_decode(text_of(cluster, "certificate-authority-data"),
                                 where + ": certificate-authority-data");
    }
    out.insecure_skip_tls_verify =
        cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
    if (!user_name.empty()) {
      const YAML::Node user = named(config["users"], user_name, "user", where);
      for (const char* refused : {"exec", "auth-provider"}) {
        if (user && user[refused]) {
          throw std::runtime_error(where + ": user '" + user_name + "' authenticates through '" +
                                   refused +
                                   "', which runs a helper program; the kubernetes backend does "
                                   "not: give it a token, token file or client certificate");
        }
      }
      out.token = text_of(user, "token");
      out.token_file = beside(path, text_of(user, "tokenFile"));
      out.client_cert_file = beside(path, text_of(user, "client-certificate"));
      out.client_key_file = beside(path, text_of(user, "client-key"));
      if (user && user["client-certificate-data"]) {
        out.client_cert_pem = base64_decode(text_of(user, "client-certificate-data"),
                                            where + ": client-certificate-data");
      }
      if (user && user["client-key-data"]) {
        out.client_key_pem =
            base64_decode(text_of(user, "client-key-data"), where + ": client-key-data");
      }
    }
    return out;
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("kubeconfig " + path + ": " + e.what());
  }
}

}  // namespace sandboxd::kubernetes
