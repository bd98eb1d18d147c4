# frozen_string_literal: true

require "fileutils"
require "selenium-webdriver"
require "tmpdir"

module Ringpool
  module Test
    # Debian's Chromium, headless, driven through its ChromeDriver (both installed by bin/setup)
    # with selenium-webdriver: for the dashboard test and bin/screenshot.
    module Browser
      CHROMIUM = ENV.fetch("RINGPOOL_CHROMIUM", "/usr/bin/chromium")
      CHROMEDRIVER = ENV.fetch("RINGPOOL_CHROMEDRIVER", "/usr/bin/chromedriver")

      # @return [String, nil] why no browser can run here, or nil when one can
      def self.missing
        [CHROMIUM, CHROMEDRIVER].find { |path| !File.executable?(path) }&.then { |path| "#{path} is not installed (bin/setup installs it)" }
      end

      # Starts a headless browser, yields its driver, quits it afterwards.
      # @param width [Integer]
      # @param height [Integer]
      # @yieldparam driver [Selenium::WebDriver::Driver]
      def self.open(width: 1400, height: 1000)
        options = Selenium::WebDriver::Chrome::Options.new(binary: CHROMIUM)
        # --no-sandbox: Chromium's sandbox refuses to run as root, which test machines often are.
        ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=#{width},#{height}"].each do |arg|
          options.add_argument(arg)
        end
        service = Selenium::WebDriver::Service.chrome(path: CHROMEDRIVER)
        # Chromium leaves a directory in its TMPDIR (org.chromium.Chromium.*, its profile's
        # singleton socket) after it quit: ChromeDriver, and the browser it starts, get one of
        # ours, removed afterwards.
        tmpdir = Dir.mktmpdir("ringpool-browser")
        driver = with_tmpdir(tmpdir) { Selenium::WebDriver.for(:chrome, options: options, service: service) }
        begin
          yield driver
        ensure
          driver.quit
        end
      ensure
        FileUtils.rm_rf(tmpdir) if tmpdir
      end

      # Runs the block with ENV["TMPDIR"] set to `dir` (for the processes it starts).
      def self.with_tmpdir(dir)
        previous = ENV.fetch("TMPDIR", nil)
        ENV["TMPDIR"] = dir
        yield
      ensure
        ENV["TMPDIR"] = previous
      end
      private_class_method :with_tmpdir
    end
  end
end
