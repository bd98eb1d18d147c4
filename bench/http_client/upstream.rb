# frozen_string_literal: true

# The upstream for bench/http_client: a plain threaded HTTP/1.1 server (a thread per
# connection, keep-alive), so that no client under test is favoured by its origin.
#
#   ruby bench/http_client/upstream.rb PORT DELAY_SECONDS [CERT_FILE KEY_FILE]
#
# Answers every request after DELAY_SECONDS with a 22-byte body; with a certificate and key,
# over TLS.
require "socket"
require "openssl"

port = Integer(ARGV.fetch(0))
delay = Float(ARGV.fetch(1, "0"))
tls = nil
if ARGV[2]
  tls = OpenSSL::SSL::SSLContext.new
  tls.cert = OpenSSL::X509::Certificate.new(File.read(ARGV[2]))
  tls.key = OpenSSL::PKey.read(File.read(ARGV[3]))
  tls.session_id_context = "weft-bench"
end
response = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 22\r\n\r\nhello from upstream!!\n"
server = TCPServer.new("127.0.0.1", port)
server.listen(4096)
Signal.trap(:TERM) { exit!(0) }

loop do
  socket = server.accept
  Thread.new(socket) do |client|
    client.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
    if tls
      client = OpenSSL::SSL::SSLSocket.new(client, tls)
      client.sync_close = true
      client.accept
    end
    buffer = +""
    loop do
      buffer << client.readpartial(16_384)
      while (finish = buffer.index("\r\n\r\n"))
        close = buffer[0, finish].match?(/^connection:\s*close/i)
        buffer = buffer[(finish + 4)..]
        sleep delay if delay.positive?
        client.write(response)
        raise EOFError if close
      end
    end
  rescue EOFError, SystemCallError, IOError, OpenSSL::SSL::SSLError
    client.close rescue nil # rubocop:disable Style/RescueModifier
  end
end
