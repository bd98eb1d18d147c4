# frozen_string_literal: true

# Shared helpers for the HTTP client benchmarks: throwaway certificates, server processes on
# loopback, timing and bar charts.
$LOAD_PATH.unshift File.expand_path("../../lib", __dir__)
require "openssl"
require "socket"
require "tmpdir"
require "fileutils"
require "timeout"
require_relative "../support/ports"
require_relative "../support/processes"
require_relative "../../test/support/certificates"

module Bench
  ROOT = File.expand_path("../..", __dir__)
  TMP = File.join(ROOT, "tmp", "bench_http_client")

  module_function

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end


  # A CA and a certificate for 127.0.0.1/localhost, written to TMP (test/support/certificates.rb).
  # @return [Hash] :ca_file, :cert_file, :key_file
  def certificates
    FileUtils.mkdir_p(TMP)
    Weft::Test::Certificates.generate(TMP, valid_for: 86_400).slice(:ca_file, :cert_file, :key_file)
  end

  # Starts a server process and waits until `port` accepts connections.
  # @return [Integer] pid
  def spawn_server(command, port, log_name, env: {})
    FileUtils.mkdir_p(TMP)
    log = File.join(TMP, "#{log_name}.log")
    pid = Process.spawn(env, *command, chdir: ROOT, out: log, err: log, pgroup: true)
    deadline = now + 30
    begin
      TCPSocket.new("127.0.0.1", port).close
    rescue SystemCallError
      raise "#{log_name} did not start in 30 s; see #{log}:\n#{File.read(log)[-2000..]}" if now > deadline
      if Process.waitpid(pid, Process::WNOHANG)
        raise "#{log_name} exited at start; see #{log}:\n#{File.read(log)[-2000..]}"
      end
      sleep 0.1
      retry
    end
    pid
  end

  # @param rows [Array<Array(String, Float)>] label and value
  # @return [String] a Unicode bar chart, longest bar = 40 cells
  def chart(rows, unit)
    max = rows.map(&:last).max.to_f
    width = rows.map { |label, _| label.size }.max
    rows.map do |label, value|
      cells = max.zero? ? 0 : (value / max * 40).round
      format("%-#{width}s %s %s %s", label, "█" * [cells, 1].max, format_number(value), unit)
    end.join("\n")
  end

  def format_number(value)
    value >= 100 ? value.round.to_s : format("%.3g", value)
  end

  def versions
    require "async/http/version" rescue nil
    parts = ["ruby #{RUBY_VERSION}", "openssl #{OpenSSL::OPENSSL_LIBRARY_VERSION}"]
    %w[puma falcon async async-http faraday].each do |name|
      spec = Gem.loaded_specs[name]
      parts << "#{name} #{spec.version}" if spec
    end
    parts.join(", ")
  end

  def machine
    cpu = File.read("/proc/cpuinfo")[/model name\s*:\s*(.*)/, 1] rescue "unknown CPU"
    "#{Etc.nprocessors} × #{cpu}, #{(File.read('/proc/meminfo')[/MemTotal:\s*(\d+)/, 1].to_i / 1024 / 1024.0).round} GB, #{`uname -sr`.strip}"
  end
end
require "etc"
require "timeout"
