# frozen_string_literal: true

require "etc"
require "time"

module Bench
  # Writes a benchmark result page (bench/results/*.md): the machine, the versions, the command,
  # then tables and bar charts. The charts are Unicode bars, so they read in any Markdown viewer
  # and in a terminal.
  class Report
    BAR_WIDTH = 40

    def initialize(title, command:)
      @title = title
      @command = command
      @sections = []
    end

    def paragraph(text)
      @sections << text.strip
    end

    # @param header [Array<String>]
    # @param rows [Array<Array>]
    def table(header, rows)
      lines = ["| #{header.join(' | ')} |", "|#{header.map { '---' }.join('|')}|"]
      rows.each { |row| lines << "| #{row.join(' | ')} |" }
      @sections << lines.join("\n")
    end

    # A horizontal bar chart of label => value, scaled to the largest value.
    def chart(title, pairs, format: "%.2f")
      largest = pairs.map(&:last).max.to_f
      width = pairs.map { |label, _| label.size }.max
      lines = pairs.map do |label, value|
        bar = "█" * (largest.positive? ? (value / largest * BAR_WIDTH).round : 0)
        "#{label.ljust(width)} #{bar} #{Kernel.format(format, value)}"
      end
      @sections << "#{title}\n\n```\n#{lines.join("\n")}\n```"
    end

    def write(path)
      File.write(path, render)
    end

    def render
      [
        "# #{@title}",
        "Measured #{Time.now.utc.iso8601} with `#{@command}`.",
        machine,
        *@sections
      ].join("\n\n") + "\n"
    end

    private

    def machine
      cpu = File.read("/proc/cpuinfo")[/^model name\s*:\s*(.+)$/, 1] rescue "unknown"
      memory = File.read("/proc/meminfo")[/^MemTotal:\s*(\d+)/, 1].to_i / 1024 / 1024 rescue 0
      gems = %w[io-event async async-http puma falcon iodine semian stoplight pg rack].filter_map do |name|
        spec = Gem.loaded_specs[name]
        "#{name} #{spec.version}" if spec
      end
      <<~TEXT.strip
        Machine: #{Etc.nprocessors} cores (#{cpu}), #{memory} GiB RAM, #{RUBY_DESCRIPTION}.
        Versions: #{gems.join(', ')}; Weft #{weft_version}.
        Load average (1, 5, 15 min) when the page was written: #{load_average}.
      TEXT
    end

    # The machine is shared with other benchmarks; the load says how much.
    def load_average
      File.read("/proc/loadavg").split.first(3).join(", ")
    rescue SystemCallError
      "unknown"
    end

    def weft_version
      require_relative "../../lib/weft/version"
      Weft::VERSION
    end
  end
end
