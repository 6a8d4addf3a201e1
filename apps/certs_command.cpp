// `caflm certs`: a small PKI for a caflm cluster's mutual TLS. One CA signs
// one certificate per node; CAF's libcaf_openssl verifies every peer against
// the CA file on both sides of a connection (it checks no host names, but the
// node certificates carry the operator's host names for other TLS clients).
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "apps/commands.hpp"

namespace caflm::apps {

namespace {

namespace fs = std::filesystem;

constexpr int kMaxNodes = 1000;
constexpr int kMaxDays = 36500;
constexpr long kBackdateSeconds = 3600;
/// Bits of randomness in each certificate's serial number.
constexpr int kSerialBits = 128;

struct CertsOptions {
  std::string out;
  int nodes = 1;
  int days = 365;
  std::vector<std::string> hosts{"localhost", "127.0.0.1", "::1"};
  bool force = false;
};

/// Frees an OpenSSL object with its own free function.
template <class T, void (*Free)(T*)>
struct OpensslDeleter {
  void operator()(T* ptr) const { Free(ptr); }
};

using Asn1OctetStringPtr =
    std::unique_ptr<ASN1_OCTET_STRING, OpensslDeleter<ASN1_OCTET_STRING, ASN1_OCTET_STRING_free>>;
using Asn1Ia5StringPtr =
    std::unique_ptr<ASN1_IA5STRING, OpensslDeleter<ASN1_IA5STRING, ASN1_IA5STRING_free>>;
using BigNumPtr = std::unique_ptr<BIGNUM, OpensslDeleter<BIGNUM, BN_free>>;
using BioPtr = std::unique_ptr<BIO, OpensslDeleter<BIO, BIO_free_all>>;
using EvpPkeyCtxPtr =
    std::unique_ptr<EVP_PKEY_CTX, OpensslDeleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpensslDeleter<EVP_PKEY, EVP_PKEY_free>>;
using GeneralNamePtr =
    std::unique_ptr<GENERAL_NAME, OpensslDeleter<GENERAL_NAME, GENERAL_NAME_free>>;
using GeneralNamesPtr =
    std::unique_ptr<GENERAL_NAMES, OpensslDeleter<GENERAL_NAMES, GENERAL_NAMES_free>>;
using X509ExtensionPtr =
    std::unique_ptr<X509_EXTENSION, OpensslDeleter<X509_EXTENSION, X509_EXTENSION_free>>;
using X509Ptr = std::unique_ptr<X509, OpensslDeleter<X509, X509_free>>;

/// Throws std::runtime_error: `what` failed, with the reason OpenSSL queued
/// (the queue is emptied so that a later failure reports its own reason).
[[noreturn]] void throw_openssl_error(const std::string& what) {
  unsigned long code = ERR_get_error();
  std::string reason = "no reason reported";
  if (code != 0) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    reason = buffer;
  }
  ERR_clear_error();
  throw std::runtime_error(what + " failed: " + reason);
}

/// Throws when an OpenSSL call reported failure (a zero or negative result).
void check(int result, const char* what) {
  if (result <= 0)
    throw_openssl_error(what);
}

/// Throws when an OpenSSL call returned no object.
template <class T>
T* check_ptr(T* ptr, const char* what) {
  if (ptr == nullptr)
    throw_openssl_error(what);
  return ptr;
}

/// `n_bytes` random bytes as lower-case hex.
std::string random_hex(int n_bytes) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n_bytes));
  check(RAND_bytes(bytes.data(), n_bytes), "RAND_bytes");
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char byte : bytes) {
    hex += digits[byte >> 4];
    hex += digits[byte & 0xf];
  }
  return hex;
}

/// A new EC key on NIST P-256 (prime256v1), the curve every TLS 1.2 peer
/// supports for ECDHE-ECDSA.
EvpPkeyPtr generate_p256_key() {
  EvpPkeyCtxPtr ctx{
      check_ptr(EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr), "EVP_PKEY_CTX_new_id(EC)")};
  check(EVP_PKEY_keygen_init(ctx.get()), "EVP_PKEY_keygen_init");
  check(EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx.get(), NID_X9_62_prime256v1),
        "EVP_PKEY_CTX_set_ec_paramgen_curve_nid(prime256v1)");
  // Named-curve encoding: peers must recognise the curve by its OID.
  check(EVP_PKEY_CTX_set_ec_param_enc(ctx.get(), OPENSSL_EC_NAMED_CURVE),
        "EVP_PKEY_CTX_set_ec_param_enc");
  EVP_PKEY* key = nullptr;
  check(EVP_PKEY_keygen(ctx.get(), &key), "EVP_PKEY_keygen(P-256)");
  return EvpPkeyPtr{key};
}

/// A fresh random, positive, non-zero serial number for `cert`.
void set_random_serial(X509* cert) {
  BigNumPtr serial{check_ptr(BN_new(), "BN_new")};
  do
    check(BN_rand(serial.get(), kSerialBits, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY), "BN_rand");
  while (BN_is_zero(serial.get()));
  check_ptr(BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert)), "BN_to_ASN1_INTEGER");
}

/// Adds the extension `nid` with the value written as in openssl.cnf
/// ("critical,CA:TRUE"); `issuer` is the signing certificate (for the
/// authority key identifier), `cert` itself when self-signed.
void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509ExtensionPtr extension{
      check_ptr(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value),
                (std::string("extension ") + OBJ_nid2sn(nid) + "=" + value).c_str())};
  check(X509_add_ext(cert, extension.get(), -1),
        (std::string("X509_add_ext(") + OBJ_nid2sn(nid) + ")").c_str());
}

/// A certificate for `key` named CN=`common_name`, valid until `days` days
/// from now, with a random serial; the caller adds extensions, the issuer
/// name and signs it.
X509Ptr new_certificate(EVP_PKEY* key, const std::string& common_name, int days) {
  X509Ptr cert{check_ptr(X509_new(), "X509_new")};
  check(X509_set_version(cert.get(), X509_VERSION_3), "X509_set_version");
  set_random_serial(cert.get());
  // Valid from an hour ago: a node whose clock runs a little behind accepts
  // freshly written certificates at once.
  check_ptr(X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds),
            "X509_gmtime_adj(notBefore)");
  check_ptr(X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr),
            "X509_time_adj_ex(notAfter)");
  check(X509_set_pubkey(cert.get(), key), "X509_set_pubkey");
  X509_NAME* subject = check_ptr(X509_get_subject_name(cert.get()), "X509_get_subject_name");
  check(X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                   -1, 0),
        "X509_NAME_add_entry_by_txt(CN)");
  return cert;
}

/// True when `name` may stand in a certificate's dNSName: letters, digits,
/// '-', '_', '.', and a leading "*." wildcard.
bool is_host_name(const std::string& name) {
  if (name.empty() || name.size() > 253)
    return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || (c == '*' && i == 0);
    if (!ok)
      return false;
  }
  return true;
}

/// One subjectAltName entry: an iPAddress when `host` parses as IPv4 or IPv6,
/// else a dNSName.
GeneralNamePtr general_name(const std::string& host) {
  GeneralNamePtr name{check_ptr(GENERAL_NAME_new(), "GENERAL_NAME_new")};
  unsigned char address[16];
  int address_size = 0;
  if (inet_pton(AF_INET, host.c_str(), address) == 1)
    address_size = 4;
  else if (inet_pton(AF_INET6, host.c_str(), address) == 1)
    address_size = 16;
  if (address_size > 0) {
    Asn1OctetStringPtr ip{check_ptr(ASN1_OCTET_STRING_new(), "ASN1_OCTET_STRING_new")};
    check(ASN1_OCTET_STRING_set(ip.get(), address, address_size), "ASN1_OCTET_STRING_set");
    GENERAL_NAME_set0_value(name.get(), GEN_IPADD, ip.release());
    return name;
  }
  if (!is_host_name(host))
    throw std::invalid_argument("--hosts: '" + host + "' is neither an IP address nor a host name");
  Asn1Ia5StringPtr dns{check_ptr(ASN1_IA5STRING_new(), "ASN1_IA5STRING_new")};
  check(ASN1_STRING_set(dns.get(), host.data(), static_cast<int>(host.size())), "ASN1_STRING_set");
  GENERAL_NAME_set0_value(name.get(), GEN_DNS, dns.release());
  return name;
}

/// Adds subjectAltName with every host of `hosts`.
void add_subject_alt_names(X509* cert, const std::vector<std::string>& hosts) {
  GeneralNamesPtr names{check_ptr(sk_GENERAL_NAME_new_null(), "sk_GENERAL_NAME_new_null")};
  for (const std::string& host : hosts) {
    GeneralNamePtr name = general_name(host);
    check(sk_GENERAL_NAME_push(names.get(), name.get()), "sk_GENERAL_NAME_push");
    name.release(); // the stack owns it now
  }
  check(X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT),
        "X509_add1_ext_i2d(subjectAltName)");
}

void sign(X509* cert, EVP_PKEY* issuer_key) {
  check(X509_sign(cert, issuer_key, EVP_sha256()), "X509_sign(SHA-256)");
}

/// A memory BIO's contents.
std::string bio_contents(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  if (size < 0 || (size > 0 && data == nullptr))
    throw_openssl_error("BIO_get_mem_data");
  return std::string(data, static_cast<std::size_t>(size));
}

std::string certificate_pem(X509* cert) {
  BioPtr bio{check_ptr(BIO_new(BIO_s_mem()), "BIO_new")};
  check(PEM_write_bio_X509(bio.get(), cert), "PEM_write_bio_X509");
  return bio_contents(bio.get());
}

/// The key unencrypted, PKCS#8 PEM ("PRIVATE KEY"): CAF loads it without a
/// passphrase.
std::string private_key_pem(EVP_PKEY* key) {
  BioPtr bio{check_ptr(BIO_new(BIO_s_mem()), "BIO_new")};
  check(PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr),
        "PEM_write_bio_PrivateKey");
  return bio_contents(bio.get());
}

/// One file to write: its path, contents and permission bits.
struct OutputFile {
  fs::path path;
  std::string contents;
  mode_t mode;
};

[[noreturn]] void throw_errno(const std::string& what, const fs::path& path) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(errno));
}

/// Writes `file` through a temporary file in the same folder renamed into
/// place: a key never exists with looser permissions than `file.mode`, and a
/// symbolic link at the path is replaced, not followed.
void write_file(const OutputFile& file) {
  std::string temp =
      (file.path.parent_path() / ("." + file.path.filename().string() + ".XXXXXX")).string();
  int fd = mkstemp(temp.data()); // created with mode 0600
  if (fd < 0)
    throw_errno("cannot create a temporary file for", file.path);
  auto fail = [&](const char* what) {
    int saved = errno;
    close(fd);
    unlink(temp.c_str());
    errno = saved;
    throw_errno(what, file.path);
  };
  if (fchmod(fd, file.mode) != 0)
    fail("cannot set the permissions of");
  std::size_t written = 0;
  while (written < file.contents.size()) {
    ssize_t n = write(fd, file.contents.data() + written, file.contents.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail("cannot write");
    written += static_cast<std::size_t>(n);
  }
  if (fsync(fd) != 0)
    fail("cannot sync");
  if (close(fd) != 0) {
    int saved = errno;
    unlink(temp.c_str());
    errno = saved;
    throw_errno("cannot close", file.path);
  }
  if (std::rename(temp.c_str(), file.path.c_str()) != 0) {
    int saved = errno;
    unlink(temp.c_str());
    errno = saved;
    throw_errno("cannot rename a temporary file to", file.path);
  }
}

void run_certs(const CertsOptions& options) {
  ERR_clear_error(); // only this command's failures are reported
  if (options.hosts.empty())
    throw std::invalid_argument("--hosts needs at least one host name or IP address");
  const fs::path dir = options.out;
  std::vector<std::string> names{"ca.pem", "ca-key.pem"};
  for (int i = 1; i <= options.nodes; ++i) {
    names.push_back("node-" + std::to_string(i) + ".pem");
    names.push_back("node-" + std::to_string(i) + "-key.pem");
  }
  // Refuse before generating anything: overwriting a CA key would orphan
  // every certificate a running cluster uses.
  if (!options.force) {
    std::vector<std::string> present;
    for (const std::string& name : names) {
      std::error_code ec;
      fs::file_status status = fs::symlink_status(dir / name, ec);
      if (status.type() == fs::file_type::not_found)
        continue;
      if (ec)
        throw std::runtime_error("cannot inspect " + (dir / name).string() + ": " + ec.message());
      present.push_back(name);
    }
    if (!present.empty()) {
      std::string list;
      for (const std::string& name : present)
        list += (list.empty() ? "" : ", ") + name;
      throw std::runtime_error("--out " + dir.string() + " already holds " + list +
                               "; pass --force to overwrite");
    }
  }

  // Everything is generated in memory first, so that a failure leaves no
  // half-written set behind.
  std::vector<OutputFile> files;
  EvpPkeyPtr ca_key = generate_p256_key();
  // A random suffix tells the CAs of two runs apart in logs and trust stores.
  X509Ptr ca = new_certificate(ca_key.get(), "caflm cluster CA " + random_hex(8), options.days);
  check(X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get())), "X509_set_issuer_name");
  add_extension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_extension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_extension(ca.get(), ca.get(), NID_subject_key_identifier, "hash");
  sign(ca.get(), ca_key.get());
  files.push_back({dir / "ca.pem", certificate_pem(ca.get()), 0644});
  files.push_back({dir / "ca-key.pem", private_key_pem(ca_key.get()), 0600});

  for (int i = 1; i <= options.nodes; ++i) {
    EvpPkeyPtr key = generate_p256_key();
    X509Ptr cert = new_certificate(key.get(), "caflm node " + std::to_string(i), options.days);
    check(X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get())),
          "X509_set_issuer_name");
    add_extension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature");
    // Every node is both: it accepts connections and opens them.
    add_extension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth");
    add_extension(cert.get(), ca.get(), NID_subject_key_identifier, "hash");
    add_extension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always");
    add_subject_alt_names(cert.get(), options.hosts);
    sign(cert.get(), ca_key.get());
    std::string stem = "node-" + std::to_string(i);
    files.push_back({dir / (stem + ".pem"), certificate_pem(cert.get()), 0644});
    files.push_back({dir / (stem + "-key.pem"), private_key_pem(key.get()), 0600});
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("cannot create --out " + dir.string() + ": " + ec.message());
  if (!fs::is_directory(dir))
    throw std::runtime_error("--out " + dir.string() + " is not a directory");
  for (const OutputFile& file : files) {
    write_file(file);
    std::printf("wrote %s\n", file.path.c_str());
  }
}

} // namespace

void add_certs_command(CLI::App& app) {
  auto options = std::make_shared<CertsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "certs", "Write a CA and node certificates for a cluster's mutual TLS (EC P-256)");
  cmd->add_option("--out", options->out,
                  "Folder for ca.pem, ca-key.pem, node-I.pem, node-I-key.pem")
      ->required();
  cmd->add_option("--nodes", options->nodes, "Node certificates to write")
      ->check(CLI::Range(1, kMaxNodes))
      ->capture_default_str();
  cmd->add_option("--days", options->days, "Days the certificates stay valid")
      ->check(CLI::Range(1, kMaxDays))
      ->capture_default_str();
  cmd->add_option("--hosts", options->hosts,
                  "Host names and IP addresses in every node certificate's subjectAltName")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--force", options->force, "Overwrite certificates and keys already in --out");
  cmd->callback([options] { run_certs(*options); });
}

} // namespace caflm::apps
