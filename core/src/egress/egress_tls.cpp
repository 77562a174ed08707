// Certificates for TLS interception (egress_tls.hpp), with OpenSSL's X509 API.
#include "sandboxd/core/egress_tls.hpp"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <stdexcept>

namespace sandboxd::core {

namespace {

template <typename T, void (*Free)(T*)>
struct Freer {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Freer<BIO, BIO_free_all>>;
using Certificate = std::unique_ptr<X509, Freer<X509, X509_free>>;
using Key = std::unique_ptr<EVP_PKEY, Freer<EVP_PKEY, EVP_PKEY_free>>;

[[noreturn]] void openssl_failed(const std::string& what) {
  throw std::runtime_error("cannot " + what + " (OpenSSL)");
}

Certificate read_certificate(const std::string& pem) {
  Bio in(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!in) openssl_failed("allocate a buffer");
  return Certificate(PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr));
}

Key read_key(const std::string& pem) {
  Bio in(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!in) openssl_failed("allocate a buffer");
  return Key(PEM_read_bio_PrivateKey(in.get(), nullptr, nullptr, nullptr));
}

// What a memory BIO holds.
std::string contents(BIO* memory) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(memory, &data);
  return std::string(data, static_cast<std::size_t>(size));
}

std::string certificate_pem(X509* certificate) {
  Bio out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509(out.get(), certificate) != 1)
    openssl_failed("write a certificate");
  return contents(out.get());
}

std::string key_pem(EVP_PKEY* key) {
  Bio out(BIO_new(BIO_s_mem()));
  if (!out ||
      PEM_write_bio_PrivateKey(out.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    openssl_failed("write a key");
  }
  return contents(out.get());
}

void add_extension(X509* certificate, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str());
  if (extension == nullptr) openssl_failed("make extension " + value);
  const int added = X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
  if (added != 1) openssl_failed("add extension " + value);
}

// A version 3 certificate for `key` named `common_name`, valid from an hour ago for `days`,
// with a random serial; its issuer and extensions are the caller's.
Certificate new_certificate(EVP_PKEY* key, const std::string& common_name, int days) {
  Certificate certificate(X509_new());
  if (!certificate || X509_set_version(certificate.get(), 2) != 1)
    openssl_failed("make a certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) openssl_failed("get random bytes");
  serial[0] &= 0x7f;  // a positive serial
  std::unique_ptr<BIGNUM, Freer<BIGNUM, BN_free>> number(BN_bin2bn(serial, sizeof serial, nullptr));
  if (!number ||
      BN_to_ASN1_INTEGER(number.get(), X509_get_serialNumber(certificate.get())) == nullptr) {
    openssl_failed("set a serial number");
  }
  if (X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(certificate.get()), static_cast<long>(days) * 86400) ==
          nullptr ||
      X509_set_pubkey(certificate.get(), key) != 1) {
    openssl_failed("set a certificate's validity and key");
  }
  X509_NAME* subject = X509_get_subject_name(certificate.get());
  if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                 -1, 0) != 1) {
    openssl_failed("name a certificate");
  }
  return certificate;
}

Key new_key() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) openssl_failed("make a P-256 key");
  return key;
}

}  // namespace

void check_certificate_authority(const TlsKeyPair& authority) {
  const Certificate certificate = read_certificate(authority.certificate_pem);
  if (!certificate) throw std::invalid_argument("the certificate is not a PEM certificate");
  const Key key = read_key(authority.key_pem);
  if (!key) throw std::invalid_argument("the key is not an unencrypted PEM private key");
  if (X509_check_ca(certificate.get()) != 1) {
    throw std::invalid_argument(certificate_subject(authority.certificate_pem) +
                                " is not a CA certificate (basicConstraints CA:TRUE)");
  }
  if (X509_cmp_current_time(X509_get0_notBefore(certificate.get())) >= 0 ||
      X509_cmp_current_time(X509_get0_notAfter(certificate.get())) <= 0) {
    throw std::invalid_argument(certificate_subject(authority.certificate_pem) +
                                " is not valid now (outside its notBefore and notAfter)");
  }
  if (X509_check_private_key(certificate.get(), key.get()) != 1) {
    throw std::invalid_argument("the key is not the key of " +
                                certificate_subject(authority.certificate_pem));
  }
}

TlsKeyPair issue_server_certificate(const TlsKeyPair& authority, const std::string& host,
                                    int days) {
  const Certificate issuer = read_certificate(authority.certificate_pem);
  const Key issuer_key = read_key(authority.key_pem);
  if (!issuer || !issuer_key) throw std::invalid_argument("not a certificate and key (PEM)");
  const Key key = new_key();
  Certificate certificate = new_certificate(key.get(), host, days);
  if (X509_set_issuer_name(certificate.get(), X509_get_subject_name(issuer.get())) != 1) {
    openssl_failed("set a certificate's issuer");
  }
  add_extension(certificate.get(), issuer.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_extension(certificate.get(), issuer.get(), NID_key_usage, "critical,digitalSignature");
  add_extension(certificate.get(), issuer.get(), NID_ext_key_usage, "serverAuth");
  add_extension(certificate.get(), issuer.get(), NID_subject_alt_name, "DNS:" + host);
  add_extension(certificate.get(), issuer.get(), NID_subject_key_identifier, "hash");
  add_extension(certificate.get(), issuer.get(), NID_authority_key_identifier, "keyid");
  if (X509_sign(certificate.get(), issuer_key.get(), EVP_sha256()) == 0) {
    openssl_failed("sign a certificate for " + host);
  }
  return {certificate_pem(certificate.get()), key_pem(key.get())};
}

TlsKeyPair make_certificate_authority(const std::string& common_name, int days) {
  const Key key = new_key();
  Certificate certificate = new_certificate(key.get(), common_name, days);
  if (X509_set_issuer_name(certificate.get(), X509_get_subject_name(certificate.get())) != 1) {
    openssl_failed("set a certificate's issuer");
  }
  add_extension(certificate.get(), certificate.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_extension(certificate.get(), certificate.get(), NID_key_usage,
                "critical,keyCertSign,cRLSign");
  add_extension(certificate.get(), certificate.get(), NID_subject_key_identifier, "hash");
  if (X509_sign(certificate.get(), key.get(), EVP_sha256()) == 0) openssl_failed("sign a CA");
  return {certificate_pem(certificate.get()), key_pem(key.get())};
}

std::string certificate_subject(const std::string& certificate_pem) {
  const Certificate certificate = read_certificate(certificate_pem);
  if (!certificate) return "(not a certificate)";
  Bio out(BIO_new(BIO_s_mem()));
  if (!out || X509_NAME_print_ex(out.get(), X509_get_subject_name(certificate.get()), 0,
                                 XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB) < 0) {
    return "(unprintable subject)";
  }
  return contents(out.get());
}

}  // namespace sandboxd::core
