// A small public-key infrastructure for the TLS tests, made at test time with the
// `openssl` command in a temporary directory that goes with the object.
#pragma once

#include "support/process.hpp"

#include <rpclb/tls.hpp>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <stdlib.h>

namespace rpclb::test {

/// CAs and certificates (EC P-256 keys, quick to make) named by the test: `NAME.pem` holds
/// a certificate, `NAME.key` its key.
class Pki {
public:
    Pki() {
        auto pattern = (std::filesystem::temp_directory_path() / "rpclb-tls-XXXXXX").string();
        if (!::mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
        dir_ = pattern;
    }
    ~Pki() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    Pki(const Pki&) = delete;
    Pki& operator=(const Pki&) = delete;

    /// A self-signed CA certificate `name`, valid 30 days.
    void make_ca(const std::string& name) const {
        run("openssl req -x509 " + new_key(name) + " -out " + name + ".pem -days 30 -subj /CN=rpclb-test-" + name);
    }
    /// Certificate `name` signed by CA `ca`, with extension line `san`
    /// ("subjectAltName=IP:127.0.0.1"), valid `days` days (negative: expired).
    void make_cert(const std::string& name, const std::string& ca, const std::string& san,
                   const std::string& days = "30") const {
        run("openssl req " + new_key(name) + " -out " + name + ".csr -subj /CN=rpclb-test-" + name);
        std::ofstream(dir_ / (name + ".ext")) << san << "\n";
        run("openssl x509 -req -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -out " +
            name + ".pem -days " + days + " -extfile " + name + ".ext");
    }

    /// Certificate `name` signed by CA `ca`, with extension line `san`, valid only from
    /// `start` to `end` (openssl's YYMMDDHHMMSSZ), to make one not valid yet.
    void make_cert_between(const std::string& name, const std::string& ca, const std::string& san,
                           const std::string& start, const std::string& end) const {
        run("openssl req " + new_key(name) + " -out " + name + ".csr -subj /CN=rpclb-test-" + name);
        std::ofstream(dir_ / (name + ".ext")) << san << "\n";
        std::ofstream(dir_ / (name + ".cnf"))
            << "[ca]\ndefault_ca = d\n[d]\ndatabase = " << name << ".index\nnew_certs_dir = .\nserial = " << name
            << ".serial\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n";
        std::ofstream(dir_ / (name + ".index"));
        std::ofstream(dir_ / (name + ".serial")) << "01\n";
        run("openssl ca -batch -notext -config " + name + ".cnf -cert " + ca + ".pem -keyfile " + ca + ".key -in " +
            name + ".csr -out " + name + ".pem -startdate " + start + " -enddate " + end + " -extfile " + name + ".ext");
    }

    std::filesystem::path cert(const std::string& name) const { return dir_ / (name + ".pem"); }
    std::filesystem::path key(const std::string& name) const { return dir_ / (name + ".key"); }
    const std::filesystem::path& dir() const { return dir_; }

    /// rpclb-node / rpclb-call flags for certificate `name` trusting CA `ca`.
    std::vector<std::string> flags(const std::string& name, const std::string& ca = "ca") const {
        return {"--tls-cert", cert(name).string(), "--tls-key", key(name).string(), "--tls-ca", cert(ca).string()};
    }
    /// ClusterOptions::tls for certificate `name` trusting CA `ca`.
    rpclb::TlsOptions options(const std::string& name, const std::string& ca = "ca") const {
        return {cert(name), key(name), cert(ca), rpclb::TlsVersion::v1_3};
    }

private:
    void run(const std::string& command) const {
        const auto full = "cd '" + dir_.string() + "' && " + command + " >>openssl.log 2>&1";
        if (std::system(full.c_str()) != 0)
            throw std::runtime_error("openssl failed: " + command + "\n" + detail::read_file(dir_ / "openssl.log"));
    }
    static std::string new_key(const std::string& name) {
        return "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name + ".key";
    }

    std::filesystem::path dir_;
};

}  // namespace rpclb::test
