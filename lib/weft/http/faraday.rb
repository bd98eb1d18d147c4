# frozen_string_literal: true

require "faraday"
require_relative "../../weft"
require_relative "client"

module Weft
  module HTTP
    # Faraday adapter: `Faraday.new(url) { |f| f.adapter :weft }`.
    #
    # Each Faraday connection gets persistent, pooled connections (the adapter keeps a
    # Weft::HTTP::Client per TLS/proxy configuration, so keep-alive connections survive from one
    # Faraday request to the next). Supports Faraday's open/read/write timeouts (and `timeout`
    # as their common default), its ssl options and proxy, streaming through `on_data`, and
    # parallel requests through `conn.in_parallel { }`, which run concurrently as tasks in a
    # Weft reactor.
    #
    # Options given to `f.adapter :weft, ...` go to Weft::HTTP::Client.new (limit:,
    # idle_timeout:, max_uses:, deadline:, ...).
    class FaradayAdapter < ::Faraday::Adapter
      self.supports_parallel = true

      # Collects the requests made inside `in_parallel` and runs them together.
      class ParallelManager
        def initialize
          @jobs = []
        end

        # @api private: the adapter queues one request
        def add(&job)
          @jobs << job
        end

        # Runs the queued requests concurrently (in the current reactor, or a new one) and
        # waits for all; each response is finished as it completes. The first failure is raised
        # once every request has ended.
        def run
          jobs = @jobs
          @jobs = []
          return if jobs.empty?
          failures = Weft.run do
            tasks = jobs.map { |job| Weft.spawn(name: "faraday parallel request") { job.call } }
            Weft.gather(tasks, collect: true).grep(Exception)
          end
          raise failures.first unless failures.empty?
        end
      end

      # @return [ParallelManager]
      def self.setup_parallel_manager(_options = nil)
        ParallelManager.new
      end

      # Faraday builds the adapter (`f.adapter :weft, **opts`).
      # @param app [#call, nil] the next middleware
      # @param opts [Hash] options for each Weft::HTTP::Client the adapter makes (limit:,
      #   idle_timeout:, max_uses:, deadline:, ...)
      def initialize(app = nil, opts = {}, &block)
        super
        @client_options = opts.transform_keys(&:to_sym)
        @clients = {}
        @lock = Thread::Mutex.new
      end

      # Faraday's entry point.
      def call(env)
        super
        if env.parallel?
          env.parallel_manager.add do
            perform(env)
            env.response.finish(env)
          end
        else
          perform(env)
        end
        @app.call(env)
      end

      # Closes the pooled connections; the adapter stays usable.
      def close
        clients = @lock.synchronize { @clients.values.tap { @clients.clear } }
        clients.each(&:close)
      end

      private

      def perform(env)
        options = timeouts(env.request)
        arguments = { headers: env.request_headers.to_h, body: env.body, **options }
        client = client_for(env)
        if env.stream_response?
          client.request(env.method, env.url, **arguments) do |response|
            save(env, response, nil, finished: false)
            env.stream_response { |&on_data| response.each_chunk(&on_data) }
            env.response_body = +""
          end
          env.response.finish(env) unless env.parallel?
        else
          response = client.request(env.method, env.url, **arguments)
          save(env, response, response.body)
        end
      rescue Weft::HTTP::ConnectTimeout => e
        # As Faraday's net_http adapter does with Net::OpenTimeout, so middleware (retry rules)
        # sees the same classes after the switch.
        raise ::Faraday::ConnectionFailed, e
      rescue Weft::HTTP::TimeoutError, Weft::DeadlineExceeded => e
        # Weft::DeadlineExceeded itself: the caller's deadline, raised where a streaming block
        # (on_data) waited.
        raise ::Faraday::TimeoutError, e
      rescue Weft::HTTP::TLSError => e
        raise ::Faraday::SSLError, e
      rescue Weft::HTTP::Error => e
        raise ::Faraday::ConnectionFailed, e
      end

      def save(env, response, body, finished: true)
        save_response(env, response.status, body, response.headers.to_h, response.reason, finished: finished)
      end

      def timeouts(request)
        {
          connect_timeout: request_timeout(:open, request),
          read_timeout: request_timeout(:read, request),
          write_timeout: request_timeout(:write, request)
        }.compact
      end

      # One client per TLS and proxy configuration (normally just one per Faraday connection).
      def client_for(env)
        ssl = ssl_options(env)
        proxy = env.request.proxy&.uri
        proxy &&= proxy_url(env.request.proxy)
        key = [ssl, proxy]
        @lock.synchronize do
          @clients[key] ||= Weft::HTTP::Client.new(
            **{ follow: 0 }.merge(@client_options), ssl: ssl, proxy: proxy
          )
        end
      end

      def proxy_url(proxy)
        uri = proxy.uri.dup
        if proxy.user
          uri.user = URI.encode_www_form_component(proxy.user)
          uri.password = URI.encode_www_form_component(proxy.password.to_s)
        end
        uri.to_s
      end

      def ssl_options(env)
        ssl = env.ssl
        return {} unless ssl && env.url.scheme == "https"
        {
          verify: ssl.verify? && ssl.verify_mode != OpenSSL::SSL::VERIFY_NONE,
          verify_hostname: ssl.verify_hostname != false,
          ca_file: ssl.ca_file, ca_path: ssl.ca_path, cert_store: ssl.cert_store,
          cert: ssl.client_cert, key: ssl.client_key,
          min_version: ssl.min_version, max_version: ssl.max_version, ciphers: ssl.ciphers
        }.reject { |_, value| value.nil? }
      end
    end
  end
end

Faraday::Adapter.register_middleware(weft: Weft::HTTP::FaradayAdapter)
