// Where the kubernetes backend finds its cluster and how it proves who it is: in-cluster (the
// pod's service-account token, CA and namespace files) or a kubeconfig (its current context or
// a named one). Pure reading, no requests, so it is unit-tested on files alone.
#pragma once

#include <optional>
#include <string>

#include "sandboxd/http.hpp"

namespace sandboxd::kubernetes {

struct KubeCredentials {
  std::string server;      // https://HOST:PORT, no trailing slash
  std::string namespace_;  // the context's namespace, or the service account's; may be ""
  std::string source;      // how it was found, for messages: "kubeconfig /path (context c)"
  std::string ca_file, ca_pem;
  std::string token;       // a literal token
  std::string token_file;  // read again on every request: bound tokens rotate (about hourly)
  std::string client_cert_file, client_cert_pem, client_key_file, client_key_pem;
  bool insecure_skip_tls_verify = false;

  // The TLS and Authorization settings of one request; reads token_file now. Throws
  // std::runtime_error naming the file when it cannot be read.
  void apply_to(http::Request& request) const;
};

// The service account's files under `root` (the real one: /var/run/secrets/kubernetes.io/
// serviceaccount) and KUBERNETES_SERVICE_HOST / _PORT. Throws std::runtime_error naming what
// is missing.
KubeCredentials in_cluster_credentials(const std::string& root);

// The kubeconfig at `path` (yaml-cpp), its current context or `context`. Refuses `exec` and
// `auth-provider` users in one sentence naming them (running a plugin's helper program is not
// ours to do). Throws std::runtime_error naming the file and the missing or bad entry.
KubeCredentials kubeconfig_credentials(const std::string& path,
                                       const std::optional<std::string>& context);

}  // namespace sandboxd::kubernetes
