// ClientHellos for the egress tests: OpenSSL's own (a real client's first bytes), and built by
// hand for what OpenSSL will not send (Encrypted Client Hello, two host names).
#pragma once

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <string>
#include <utility>
#include <vector>

namespace sandboxd::testing {

// A real ClientHello: what OpenSSL sends first for a connection to `server_name`.
inline std::string openssl_client_hello(const char* server_name) {
  SSL_CTX* context = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(context);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  if (server_name != nullptr) SSL_set_tlsext_host_name(ssl, server_name);
  SSL_set_connect_state(ssl);
  SSL_do_handshake(ssl);  // wants to read: the hello is in `out`
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<std::size_t>(size));
  SSL_free(ssl);
  SSL_CTX_free(context);
  return hello;
}

// A minimal ClientHello record with the given extensions (type, body).
inline std::string built_client_hello(const std::vector<std::pair<int, std::string>>& extensions) {
  const auto u16 = [](std::size_t v) {
    return std::string{static_cast<char>(v >> 8), static_cast<char>(v & 0xff)};
  };
  std::string ext;
  for (const auto& [type, body] : extensions) ext += u16(type) + u16(body.size()) + body;
  std::string hello = "\x03\x03" + std::string(32, 'r') + std::string("\x00", 1) + u16(2) +
                      std::string("\x13\x01", 2) + std::string("\x01\x00", 2) + u16(ext.size()) +
                      ext;
  std::string handshake =
      std::string("\x01", 1) + std::string("\x00", 1) + u16(hello.size()) + hello;
  return std::string("\x16\x03\x01", 3) + u16(handshake.size()) + handshake;
}

inline std::string sni_extension(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& name : names) {
    list += std::string("\x00", 1) + static_cast<char>(name.size() >> 8) +
            static_cast<char>(name.size() & 0xff) + name;
  }
  return std::string{static_cast<char>(list.size() >> 8), static_cast<char>(list.size() & 0xff)} +
         list;
}

}  // namespace sandboxd::testing
