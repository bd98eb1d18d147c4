# frozen_string_literal: true

require "fileutils"
require "openssl"
require "tmpdir"

module Weft
  module Test
    # Throwaway TLS material for tests and benchmarks: a certificate authority and a server
    # certificate it signed (EC P-256), written as PEM files.
    #
    #   certs = Weft::Test::Certificates.generate               # localhost and 127.0.0.1
    #   server_tls = Weft::Test::Certificates.server_context(certs)
    #   client_ca = certs[:ca_file]
    module Certificates
      module_function

      # @param dir [String] where the PEM files go; by default a new temp dir, removed when the
      #   test process exits (a run of the suite left 70 of them in /tmp)
      # @param san [String] the server certificate's subjectAltName
      # @param valid_for [Integer] seconds the certificates stay valid
      # @return [Hash] :ca, :cert, :key (OpenSSL objects), :ca_file, :cert_file, :key_file, :dir
      def generate(dir = temporary_dir, san: "DNS:localhost,IP:127.0.0.1", valid_for: 3600)
        ca_key = OpenSSL::PKey::EC.generate("prime256v1")
        ca = certificate("CN=Weft Test CA", ca_key, ca_key, nil, valid_for, ca: true)
        key = OpenSSL::PKey::EC.generate("prime256v1")
        cert = certificate("CN=localhost", key, ca_key, ca, valid_for, san: san)
        files = { ca_file: File.join(dir, "ca.pem"), cert_file: File.join(dir, "cert.pem"), key_file: File.join(dir, "key.pem") }
        File.write(files[:ca_file], ca.to_pem)
        File.write(files[:cert_file], cert.to_pem)
        File.write(files[:key_file], key.to_pem)
        { ca: ca, cert: cert, key: key, dir: dir, **files }
      end

      # @param certs [Hash] from #generate
      # @return [OpenSSL::SSL::SSLContext] a server context presenting the certificate
      def server_context(certs)
        context = OpenSSL::SSL::SSLContext.new
        context.cert = certs[:cert]
        context.key = certs[:key]
        context.session_id_context = "weft-test"
        context
      end

      # A new temp dir, removed at the exit of the process that made it (not of a forked child:
      # the test's server may still read the files). Whatever the test's outcome: the files
      # may be read until its servers and clients are gone, which a test's failure can delay.
      def temporary_dir
        dir = Dir.mktmpdir("weft-tls")
        owner = Process.pid
        at_exit { FileUtils.rm_rf(dir) if Process.pid == owner }
        dir
      end

      def certificate(subject, key, issuer_key, issuer, valid_for, ca: false, san: nil)
        cert = OpenSSL::X509::Certificate.new
        cert.version = 2
        cert.serial = rand(1 << 64)
        cert.subject = OpenSSL::X509::Name.parse(subject)
        cert.issuer = issuer ? issuer.subject : cert.subject
        cert.public_key = key
        cert.not_before = Time.now - 60
        cert.not_after = Time.now + valid_for
        extensions = OpenSSL::X509::ExtensionFactory.new
        extensions.subject_certificate = cert
        extensions.issuer_certificate = issuer || cert
        if ca
          cert.add_extension(extensions.create_extension("basicConstraints", "CA:TRUE", true))
          cert.add_extension(extensions.create_extension("keyUsage", "keyCertSign,cRLSign", true))
        else
          cert.add_extension(extensions.create_extension("subjectAltName", san))
          cert.add_extension(extensions.create_extension("extendedKeyUsage", "serverAuth"))
        end
        cert.sign(issuer_key, OpenSSL::Digest.new("SHA256"))
        cert
      end
      private_class_method :certificate, :temporary_dir
    end
  end
end
