# frozen_string_literal: true

require "uri"
require_relative "../../weft"
require_relative "../pool"
require_relative "../renamed_options"
require_relative "errors"
require_relative "origin"
require_relative "budget"
require_relative "request"
require_relative "response"
require_relative "connection"
require_relative "connector"
require_relative "proxy"

module Weft
  module HTTP
    # A persistent HTTP/1.1 client: one pool of keep-alive connections per origin, TLS with
    # verification and session resumption, timeouts and a total deadline (which the caller's
    # Weft.deadline shortens), a limit on buffered bodies, gzip, opt-in redirects, proxies from
    # the environment.
    #
    #   client = Weft::HTTP::Client.new("https://api.example.com", deadline: 5)
    #   client.get("/users/1").body
    #   client.post("/users", body: JSON.generate(user), headers: { "content-type" => "application/json" })
    #   client.get("/export") { |response| response.each_chunk { |chunk| file.write(chunk) } }
    #
    # Thread- and fiber-safe: share one client. Inside Weft.run, requests made from several
    # tasks run concurrently, each on its own connection; outside a reactor the client simply
    # blocks the calling thread.
    class Client
      DEFAULTS = {
        limit: 64, max_connecting: 16, adaptive: false, idle_timeout: 4, max_uses: 1000, max_age: nil,
        connect_timeout: 10, read_timeout: 30, write_timeout: 30, acquire_timeout: nil,
        header_timeout: 30, body_timeout: nil, deadline: 60, max_body_size: 64 * 1024 * 1024,
        follow: 0, decompress: true, ssl: {}, proxy: :env, headers: {}, breaker: nil
      }.freeze
      # Options a single request may override.
      REQUEST_OPTIONS = %i[connect_timeout read_timeout write_timeout acquire_timeout header_timeout body_timeout
                           deadline max_body_size follow].freeze
      # Options that were renamed to the names every Weft pool uses: old name => new name (see
      # Weft::RenamedOptions). The per-request one is in both lists.
      RENAMED_OPTIONS = { pool_timeout: :acquire_timeout, max_requests: :max_uses }.freeze
      RENAMED_REQUEST_OPTIONS = { pool_timeout: :acquire_timeout }.freeze
      # Options that are a number of seconds (or nil for no limit).
      SECONDS = %i[idle_timeout max_age connect_timeout read_timeout write_timeout acquire_timeout header_timeout
                   body_timeout deadline].freeze
      REDIRECT_DRAIN_LIMIT = 65_536
      # The fields the client adds to a request that does not set them (see #extra_headers).
      USER_AGENT_FIELD = ["User-Agent", Request::USER_AGENT].freeze
      ACCEPT_ENCODING_FIELD = ["Accept-Encoding", "gzip, deflate"].freeze
      BOTH_FIELDS = [USER_AGENT_FIELD, ACCEPT_ENCODING_FIELD].freeze
      USER_AGENT_ONLY = [USER_AGENT_FIELD].freeze
      ACCEPT_ENCODING_ONLY = [ACCEPT_ENCODING_FIELD].freeze
      NO_FIELDS = [].freeze
      # What a breaker made per origin counts by default (see #build_breakers): the client's
      # errors, and a timeout or deadline around the request (Weft.timeout, Timeout.timeout, a
      # call cancelled past its Weft.deadline).
      ORIGIN_FAILURES = [Error, Timeout::Error].freeze
      private_constant :SECONDS, :ORIGIN_FAILURES, :REDIRECT_DRAIN_LIMIT, :USER_AGENT_FIELD, :ACCEPT_ENCODING_FIELD,
                       :BOTH_FIELDS, :USER_AGENT_ONLY, :ACCEPT_ENCODING_ONLY, :NO_FIELDS

      # @return [URI::Generic, nil] the base URL relative request URLs resolve against
      attr_reader :base_url

      # @param base_url [String, URI, nil] e.g. "https://api.example.com/v1" or
      #   "unix:///run/app.sock"; requests may then give paths ("/users")
      # @param limit [Integer] connections per origin at most
      # @param max_connecting [Integer, nil] connections per origin being opened at once, at most
      #   (nil: up to `limit`, and every request below `limit` connects at once). A burst of
      #   requests beyond it waits for a connection to open or to come back; past this many
      #   connections the pool opens one more only when waiting for one to come back is
      #   expected to take longer (Weft::Pool's growth rule) or none comes back: against an
      #   origin that answers faster than a connection opens, bursts of 1,000 requests share
      #   the first 16 connections instead of opening 16 more each (docs/http_client.md,
      #   "Bursts").
      # @param adaptive [Boolean] let the requests in flight per origin, at most, follow the
      #   origin's latency, between `max_connecting` and `limit` (Weft::Pool::AdaptiveLimit):
      #   an origin at its capacity, whose latency grows with the requests sent, gets about
      #   three times what it serves at once (never fewer than max_connecting) and the rest
      #   wait in the client, where a request past its deadline leaves without costing the
      #   origin anything (docs/http_client.md, "A saturated origin"). Off by default: an
      #   origin whose latencies vary widely is held back while the limit learns that they are
      #   its own (8-64% fewer requests/s over 10 bursts in bench/http_client/saturated.rb)
      # @param idle_timeout [Numeric, nil] close connections idle this long (seconds; 4 by
      #   default, under the 5 s that Node and Apache keep an idle connection, so that a request
      #   is not written as the server closes it; a server's `Keep-Alive: timeout=N` shortens it
      #   to N - 1 for its connections)
      # @param max_uses [Integer, nil] requests per connection before it is replaced (old name:
      #   max_requests)
      # @param max_age [Numeric, nil] replace connections this many seconds old
      # @param connect_timeout [Numeric, nil] DNS + connect + TLS handshake
      # @param read_timeout [Numeric, nil] each read (waiting for the head, or for body bytes)
      # @param write_timeout [Numeric, nil] each write
      # @param acquire_timeout [Numeric, nil] waiting for a connection when `limit` are in use
      #   (defaults to connect_timeout; old name: pool_timeout)
      # @param header_timeout [Numeric, nil] from the request sent to the whole response head
      #   (defaults to read_timeout): a server trickling its head cannot stretch it
      # @param body_timeout [Numeric, nil] from the response head to the end of the body
      # @param deadline [Numeric, nil] the whole request, redirects and retry included (60 s by
      #   default; nil for none). A Weft.deadline around the request, or around the task that
      #   made it, shortens it.
      # @param max_body_size [Integer, nil] the most bytes Response#body holds (64 MiB by
      #   default; nil for no limit); streaming with Response#each_chunk is not limited
      # @param follow [Integer] redirects to follow (0: return the 3xx response)
      # @param decompress [Boolean] send Accept-Encoding: gzip, deflate and inflate the body
      # @param ssl [Hash] see Connector#initialize; `verify: false` disables verification
      # @param proxy [:env, String, Proxy, nil] proxies from the environment (default), one proxy
      #   URL for all origins, or none
      # @param headers [Hash] fields sent with every request
      # @param breaker [Weft::CircuitBreaker, true, Hash, nil] puts the origins behind circuit
      #   breakers (see Weft::Resilience::OriginBreakers): this one for every origin, or one per
      #   origin shared by every client of the process (true: default options; a Hash:
      #   CircuitBreaker options, plus `failed_statuses:`, 500..599 by default). Per-origin
      #   breakers count the client's errors and deadlines unless `failure:` says otherwise, not
      #   what the caller's side raises (see #build_breakers)
      def initialize(base_url = nil, **options)
        options = RenamedOptions.rename("Weft::HTTP::Client.new", options, RENAMED_OPTIONS)
        unknown = options.keys - DEFAULTS.keys
        raise ArgumentError, "unknown option(s) #{unknown.join(', ')}" unless unknown.empty?
        check_limits(options)
        @options = DEFAULTS.merge(options)
        @options[:header_timeout] = @options[:read_timeout] unless options.key?(:header_timeout)
        @limits = limits(@options)
        @base_url = base_url && parse_url(base_url)
        @base_origin = @base_url && Origin.from_uri(@base_url)
        @connector = Connector.new(ssl: @options[:ssl], proxy: build_proxy(@options[:proxy]))
        @default_headers = Request.fields(@options[:headers])
        @breakers = @options[:breaker] && build_breakers(@options[:breaker])
        # Keyed by the origin's String (Origin#to_s), not the Origin: a Hash key whose class
        # defines #hash makes every lookup go through Ruby's recursion guard, whose table is
        # fiber-local, so each new task made it anew (two Hashes per request).
        @pools = {}
        @pools_lock = Thread::Mutex.new
        @closed = false
      end

      # Sends a request. Without a block, reads the whole body and returns the response. With a
      # block, yields the response as soon as its head has arrived, so the body can be streamed
      # (Response#each_chunk), and closes it when the block returns; the block's value is
      # returned.
      #
      # @param method [String, Symbol]
      # @param url [String, URI] absolute, or relative to the base URL
      # @param headers [Hash, nil]
      # @param body [String, #read, Enumerable, nil] IO-like and Enumerable bodies are streamed
      #   (chunked unless their size is known)
      # @param query [Hash, nil] added to the URL's query string
      # @param options per-request overrides (see REQUEST_OPTIONS): connect_timeout,
      #   read_timeout, write_timeout, acquire_timeout, header_timeout, body_timeout, deadline,
      #   max_body_size, follow
      # @return [Response, Object]
      # @raise [Weft::HTTP::Error] see errors.rb for the classes
      # @raise [Weft::CircuitOpen] with `breaker:`, when the origin's breaker refuses the request
      #   (nothing is sent); the breaker judges the exchange up to the whole body without a
      #   block, up to the response head with one
      def request(method, url, headers: nil, body: nil, query: nil, **options, &block)
        run_request(method, url, headers, body, query, options, &block)
      end

      # #request with the method GET, HEAD, DELETE or OPTIONS, and the same arguments.
      %w[get head delete options].each do |name|
        method = name.upcase.freeze
        define_method(name) do |url, headers: nil, body: nil, query: nil, **options, &block|
          run_request(method, url, headers, body, query, options, &block)
        end
      end

      # #request with the method POST, PUT or PATCH, and the same arguments.
      %w[post put patch].each do |name|
        method = name.upcase.freeze
        define_method(name) do |url, body: nil, headers: nil, query: nil, **options, &block|
          run_request(method, url, headers, body, query, options, &block)
        end
      end

      # Closes the idle connections of every origin; the client stays usable and opens new
      # ones. (Idle connections past `idle_timeout` are closed on the next request anyway.)
      # @return [nil]
      def close_idle
        pools.each(&:clear)
        nil
      end

      # Closes every idle connection and refuses further requests. Connections in use are
      # closed as their responses end.
      def close
        @closed = true
        pools.each(&:close)
        nil
      end

      # @return [Hash{String => Hash}] per origin, the pool's statistics (see Weft::Pool)
      def statistics
        @pools_lock.synchronize { @pools.transform_values(&:statistics) }
      end

      # @return [String] the base URL and the number of origins pooled, for logs and the console
      def inspect
        "#<#{self.class.name} #{@base_url || '(no base URL)'} origins=#{@pools.size}#{' closed' if @closed}>"
      end
      alias to_s inspect

      # A request's hold on its pooled connection, which its Response keeps from
      # the head to the end of the body (one object per request, where two closures were).
      class Hold
        def initialize(pool, connection, budget)
          @pool = pool
          @connection = connection
          @budget = budget
        end

        # @param into [String, nil] see Connection#read_body
        # @return [String, nil] the next raw piece of the body, nil at its end
        def read(into)
          @budget.enforce { @connection.read_body(@budget, into) }
        end

        # Hands the connection back: to the pool when the response was read to the end and the
        # connection may carry another request, closed otherwise.
        # @param complete [Boolean] whether the body was read to its end
        def finish(complete)
          Budget.uninterrupted do
            if complete && @connection.reusable? && !@pool.closed?
              @pool.checkin(@connection)
            else
              @pool.discard(@connection)
            end
          end
        end
      end
      private_constant :Hold

      # @api private
      # @return [OpenSSL::SSL::Session, nil] the TLS session kept for an origin
      def tls_session(url)
        @connector.session_for(Origin.from_uri(parse_url(url)))
      end

      private

      # #request, its keywords passed on as they are: forwarding them as keywords (`**options`)
      # costs two Hashes per request.
      def run_request(method, url, headers, body, query, options)
        raise Weft::UsageError, "the client is closed" if @closed
        options = request_options(options)
        budget = Budget.new(options.equal?(@options) ? @limits : limits(options), options[:deadline])
        request = build_request(method, url, headers, body, query)
        buffered = !block_given?
        response =
          if @breakers
            # The budget's deadline started before the breaker: it bounds the breaker's waits
            # (a rate limit, a bulkhead) as well as the request's own, and the caller's deadline
            # passing during them is the client's DeadlineExceeded, as during any other wait.
            budget.enforce(phase: :guards) do
              @breakers.call(request.origin, deadline: budget.deadline) { respond(request, budget, options, buffered) }
            end
          else
            respond(request, budget, options, buffered)
          end
        return response if buffered
        begin
          yield response
        ensure
          response.close
        end
      end

      def request_options(options)
        return @options if options.empty?
        options = RenamedOptions.rename("Weft::HTTP::Client#request", options, RENAMED_REQUEST_OPTIONS)
        unknown = options.keys - REQUEST_OPTIONS
        raise ArgumentError, "unknown request option(s) #{unknown.join(', ')}" unless unknown.empty?
        check_limits(options)
        merged = @options.merge(options)
        merged[:header_timeout] = merged[:read_timeout] if options.key?(:read_timeout) && !options.key?(:header_timeout)
        merged
      end

      # @return [Hash] the Budget limits for these options
      def limits(options)
        Budget.limits(connect: options[:connect_timeout], read: options[:read_timeout], write: options[:write_timeout],
                      acquire: options[:acquire_timeout] || options[:connect_timeout],
                      header: options[:header_timeout], body: options[:body_timeout])
      end

      # @raise [ArgumentError] for a number of seconds or a size that cannot be one
      def check_limits(options)
        SECONDS.each do |name|
          next if options[name].nil?
          begin
            Deadline.validate(options[name])
          rescue ArgumentError
            raise ArgumentError, "#{name} must be a finite number of seconds, zero or more, or nil (got #{options[name].inspect})"
          end
        end
        unless [true, false].include?(options.fetch(:adaptive, false))
          raise ArgumentError, "adaptive must be true or false (got #{options[:adaptive].inspect})"
        end
        connecting = options[:max_connecting]
        unless connecting.nil? || (connecting.is_a?(Integer) && connecting.positive?)
          raise ArgumentError, "max_connecting must be a positive Integer or nil (got #{connecting.inspect})"
        end
        size = options[:max_body_size]
        return if size.nil? || (size.is_a?(Integer) && size.positive?)
        raise ArgumentError, "max_body_size must be a positive Integer (bytes) or nil (got #{size.inspect})"
      end

      def build_request(method, url, headers, body, query)
        origin, target, credentials = resolve(url)
        if query && !query.empty?
          separator = target.include?("?") ? "&" : "?"
          target = "#{target}#{separator}#{URI.encode_www_form(query)}"
        end
        headers = headers ? merge_headers(Request.fields(headers)) : @default_headers
        if credentials && headers.none? { |name, _| name.casecmp?("authorization") }
          headers += [["Authorization", "Basic #{[credentials].pack('m0')}"]]
        end
        Request.new(method, origin, target, headers, body)
      end

      # The client's default fields, overridden by the request's own of the same name.
      def merge_headers(fields)
        return fields if @default_headers.empty?
        names = fields.map { |name, _| name.downcase }
        @default_headers.reject { |name, _| names.include?(name.downcase) } + fields
      end

      # @return [Array(Origin, String, String or nil)] the origin and the request target for a
      #   URL, and "user:password" if the URL (or the base URL, for a relative one) has them
      def resolve(url)
        text = url.to_s
        # A fragment is never sent (RFC 9110 4.2.4): a server would see '#' in the target, which
        # is invalid there (Weft's own server answers 400), and a query: would go after it.
        text = text[0, text.index("#")] if text.include?("#")
        if text.start_with?("/") || !text.match?(%r{\A[a-z][a-z0-9+.-]*:}i)
          raise ArgumentError, "relative URL #{text.inspect} needs a client with a base URL" unless @base_url
          base_path = @base_origin.unix? ? "/" : @base_url.path
          target = text.start_with?("/") ? text : File.join(base_path.empty? ? "/" : base_path, text)
          return [@base_origin, target, credentials(@base_url)]
        end
        uri = parse_url(url)
        origin = Origin.from_uri(uri)
        raise ArgumentError, "give unix origins as the base URL, and paths per request" if origin.unix?
        target = uri.path.empty? ? "/" : uri.path
        target += "?#{uri.query}" if uri.query
        [origin, target, credentials(uri)]
      end

      # @return [String, nil] "user:password" from a URL's userinfo, percent-decoded
      def credentials(uri)
        return nil unless uri.user
        "#{URI.decode_www_form_component(uri.user)}:#{URI.decode_www_form_component(uri.password.to_s)}"
      end

      def parse_url(url)
        url.is_a?(URI::Generic) ? url : URI.parse(url.to_s)
      rescue URI::InvalidURIError => e
        raise ArgumentError, "invalid URL #{url.inspect}: #{e.message}"
      end

      # The response to a request, redirects followed, with its whole body read if `buffered`.
      def respond(request, budget, options, buffered)
        budget.enforce(defer: true) do
          response = follow_redirects(request, budget, options)
          response.body if buffered
          response
        end
      end

      def follow_redirects(request, budget, options)
        follow = options[:follow]
        redirects = 0
        # A loop, not Kernel#loop: a return from inside a block is a throw that unwinds the
        # block's frame, and every request returns from here.
        while true # rubocop:disable Style/InfiniteLoop
          response = perform(request, budget, options[:max_body_size])
          return response unless follow.positive? && response.redirect?
          if redirects >= follow
            response.close
            raise TooManyRedirects, "more than #{follow} redirects, the last from #{request.url} to #{response['location']}"
          end
          following = request.redirect(response.status, response["location"])
          return response unless following # a streamed body cannot be sent again
          drain(response)
          request = following
          redirects += 1
        end
      end

      # Reads a small redirect body so the connection can be reused; a large one is abandoned.
      def drain(response)
        read = 0
        response.each_chunk(String.new(encoding: Encoding::BINARY)) do |chunk|
          read += chunk.bytesize
          break if read > REDIRECT_DRAIN_LIMIT
        end
      ensure
        response.close
      end

      # Sends one request and reads its head; retries once on a fresh connection when a reused
      # one turns out to have been closed by the server while idle (idempotent requests only).
      def perform(request, budget, max_body_size)
        retried = false
        begin
          pool = pool_for(request.origin)
          connection = checkout(pool, request.origin, budget)
          exchange(pool, connection, request, budget, max_body_size)
        rescue Connection::Stale => e
          raise ConnectionReset, e.message if retried || !request.retryable?
          retried = true
          request.rewind
          retry
        end
      end

      # Sends the request and reads the response head; the Response then owns the connection
      # and hands it back (or closes it) when its body ends.
      def exchange(pool, connection, request, budget, max_body_size)
        hold = Hold.new(pool, connection, budget)
        begin
          # Inflate only bodies the client asked to be compressed, not the caller.
          decode = @options[:decompress] && !request["accept-encoding"]
          connection.write_request(request, budget, extra_headers(request, decode))
          head = connection.read_head(request.method, budget)
          response = Response.new(head, request, hold, decode, max_body_size)
        rescue Exception # rubocop:disable Lint/RescueException
          hold.finish(false)
          raise
        end
        # Not under the rescue above: once the connection is back in the pool another request
        # may hold it, and only the Response knows whether it was handed back.
        response.body if head.framing == :none # nothing to read: the connection is free at once
        response
      end

      # The fields the client adds: User-Agent, and Accept-Encoding when it inflates bodies,
      # unless the request has its own. Frozen Arrays, not new ones per request.
      # @return [Array<Array(String, String)>]
      def extra_headers(request, decode)
        if request["user-agent"]
          decode ? ACCEPT_ENCODING_ONLY : NO_FIELDS
        else
          decode ? BOTH_FIELDS : USER_AGENT_ONLY
        end
      end

      def checkout(pool, origin, budget)
        seconds, error = budget.limit(:acquire)
        raise budget.exceeded(error, origin.to_s) if seconds && seconds <= 0
        pool.checkout(budget, acquire_timeout: seconds)
      rescue Weft::Pool::TimeoutError
        raise budget.exceeded(error, "all #{pool.in_flight_limit} connections to #{origin} busy")
      rescue Weft::Pool::ClosedError
        raise Weft::UsageError, "the client is closed"
      end

      def pool_for(origin)
        @pools_lock.synchronize do
          @pools[origin.to_s] ||= Weft::Pool.new(
            limit: @options[:limit], max_creating: @options[:max_connecting], adaptive: @options[:adaptive],
            idle_timeout: @options[:idle_timeout],
            max_uses: @options[:max_uses],
            max_age: @options[:max_age], check: :healthy?.to_proc, close: :close.to_proc
          ) { |budget| @connector.open(origin, budget) }
        end
      end

      def pools
        @pools_lock.synchronize { @pools.values }
      end

      # The resilience layer is loaded here, by the clients that use a breaker, and only by them.
      # Breakers made per origin count the client's own errors and timeouts (ORIGIN_FAILURES)
      # unless `failure:` is given: what else a request raises is the caller's (a streamed body
      # shorter than its Content-Length, an IO body that fails to read, a closed client), and
      # counted it would shut the origin out for every caller.
      # @return [Weft::Resilience::OriginBreakers]
      def build_breakers(setting)
        require_relative "../resilience"
        case setting
        when CircuitBreaker then Resilience::OriginBreakers.new("http", breaker: setting)
        when true then Resilience::OriginBreakers.new("http", failure: ORIGIN_FAILURES)
        when Hash then Resilience::OriginBreakers.new("http", **{ failure: ORIGIN_FAILURES }.merge(setting))
        else raise ArgumentError, "breaker must be a Weft::CircuitBreaker, true or a Hash of its options (got #{setting.inspect})"
        end
      end

      def build_proxy(option)
        case option
        when :env then Proxy.from_env
        when nil, false then nil
        when Proxy then option
        when String, URI::Generic then Proxy.new(http: option.to_s, https: option.to_s)
        else raise ArgumentError, "proxy: must be :env, a URL, a Weft::HTTP::Proxy or nil"
        end
      end
    end
  end
end
