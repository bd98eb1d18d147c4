# frozen_string_literal: true

# Shared by the PostgreSQL benchmarks: the database to run against and small helpers.
#
# With DATABASE_URL set the benchmarks use that server; otherwise they start a private
# throwaway cluster (the one the tests use: test/support/postgres_cluster.rb) with room for
# the peers' connections, and remove it at exit.

ROOT = File.expand_path("../..", __dir__)
$LOAD_PATH.unshift(File.join(ROOT, "lib"))

require "etc"
require "open3"
require "pg"

module PostgresBench
  module_function

  # @return [Hash] :url, :host, :port, :cluster (nil when DATABASE_URL was given)
  def database
    @database ||= if ENV["DATABASE_URL"]
                    url = ENV["DATABASE_URL"]
                    info = PG::Connection.conninfo_parse(url).to_h { |o| [o[:keyword].to_sym, o[:val]] }
                    { url: url, host: info[:host] || "127.0.0.1", port: (info[:port] || 5432).to_i, cluster: nil }
                  else
                    require File.join(ROOT, "test/support/postgres_cluster")
                    settings = Weft::Test::PostgresCluster::SETTINGS
                    settings = settings.merge("max_connections" => "400")
                    Weft::Test::PostgresCluster.send(:remove_const, :SETTINGS)
                    Weft::Test::PostgresCluster.const_set(:SETTINGS, settings.freeze)
                    cluster = Weft::Test::PostgresCluster.new.start
                    { url: cluster.url, host: cluster.host, port: cluster.port, cluster: cluster }
                  end
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # The PostgreSQL server's version string.
  def server_version
    conn = PG.connect(database[:url])
    conn.exec("show server_version").getvalue(0, 0)
  ensure
    conn&.close
  end

  def machine
    cpu = File.read("/proc/cpuinfo")[/model name\s*:\s*(.+)/, 1] rescue "unknown" # rubocop:disable Style/RescueModifier
    memory = (File.read("/proc/meminfo")[/MemTotal:\s+(\d+)/, 1].to_i / 1024.0 / 1024).round(1) rescue "?" # rubocop:disable Style/RescueModifier
    "#{Etc.nprocessors} CPUs (#{cpu}), #{memory} GiB, #{RUBY_DESCRIPTION}"
  end

  # A horizontal bar chart in Unicode blocks.
  def bars(rows, width: 40, unit: "")
    max = rows.map(&:last).max.to_f
    label_width = rows.map { |label, _| label.size }.max
    rows.map do |label, value|
      length = max.positive? ? (value / max * width) : 0
      full = length.floor
      bar = ("█" * full) + (length - full >= 0.5 ? "▌" : "")
      format("%-#{label_width}s %s %s%s", label, bar.ljust(width + 1), format_number(value), unit)
    end.join("\n")
  end

  def format_number(value)
    value >= 100 ? value.round.to_s.reverse.scan(/\d{1,3}/).join(",").reverse : format("%.1f", value)
  end
end
