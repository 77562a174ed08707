// Certificates for the egress proxy's TLS interception (issue 34 §3, `network.inject_tls_ca`):
// to put a secret into an HTTPS request, the proxy ends the sandbox's TLS itself, showing a
// certificate for the destination that the operator's CA signed (the sandbox's image trusts that
// CA), and opens its own TLS to the real destination. Only destinations a secret is bound to are
// intercepted; every other tunnel stays end to end.
#pragma once

#include <string>

namespace sandboxd::core {

// A certificate and its private key, both PEM.
struct TlsKeyPair {
  std::string certificate_pem;
  std::string key_pem;
};

// Throws std::invalid_argument saying what is wrong with `authority` as a signing CA: not a
// certificate or not a key (PEM), not a CA (basicConstraints CA:TRUE), not valid now, or a key
// that is not the certificate's. The message never holds the key.
void check_certificate_authority(const TlsKeyPair& authority);

// A server certificate for `host` (its subjectAltName), signed by `authority`, valid from an
// hour ago for `days` days, with a fresh P-256 key. Throws std::runtime_error on an OpenSSL
// failure.
TlsKeyPair issue_server_certificate(const TlsKeyPair& authority, const std::string& host, int days);

// A self-signed CA with a fresh P-256 key (tests; docs/egress.md shows the openssl commands an
// operator runs instead).
TlsKeyPair make_certificate_authority(const std::string& common_name, int days);

// The subject of a PEM certificate, one line ("CN=sandboxd egress CA"), for check-config.
std::string certificate_subject(const std::string& certificate_pem);

}  // namespace sandboxd::core
