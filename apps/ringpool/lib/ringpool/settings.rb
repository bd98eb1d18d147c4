# frozen_string_literal: true

require "digest"
require "fileutils"
require "tmpdir"
require "weft/resilience"

module Ringpool
  # A shard's settings, from keywords or the environment (Settings.from_env). Checked when made:
  # a bad value is an ArgumentError naming it, before anything starts.
  #
  #   DATABASE_URL                   PostgreSQL (required)
  #   RINGPOOL_SOCKET_DIR            where shards' unix sockets go (default $TMPDIR/ringpool)
  #   RINGPOOL_PEER_ADDRESS          host:port: shards listen for their peers over TCP instead,
  #                                  shard N on port + N of that host (the address the other
  #                                  hosts reach this one at), for clusters on several hosts
  #   RINGPOOL_DEADLINE_MS           one allocation request, fan-out included (default 50)
  #   RINGPOOL_OWNERSHIP_INTERVAL    seconds between ownership ticks (default 1)
  #   RINGPOOL_DB_POOL               PostgreSQL connections per shard (default 8)
  #   RINGPOOL_BREAKER_OPEN_FOR      seconds a peer's breaker stays open (default 5)
  #   RINGPOOL_BREAKER_RAMP_FOR      seconds its ramp back to all traffic takes (default 6)
  #   RINGPOOL_BREAKER_MINIMUM_CALLS calls judged before it may open (default 20)
  #   RINGPOOL_BREAKER_WINDOW        seconds of calls it judges (default 3): it opens when more
  #                                  than half of them failed; a window of the last 100 calls
  #                                  opened on a busy machine's stall at 200 requests/s
  #                                  (bench/results/ringpool-notes.md)
  #   RINGPOOL_BREAKER_FAILING_FOR   seconds the failures must have gone on before it opens
  #                                  (default 1.5): a peer's calls are batched, a few dozen a
  #                                  second, so a burst of late calls after a quiet spell (a
  #                                  client's cold start) was enough on its own to open it
  class Settings
    # @return [String]
    attr_reader :database_url
    # @return [String]
    attr_reader :socket_dir
    # @return [Float] seconds
    attr_reader :deadline
    # @return [Float] seconds
    attr_reader :ownership_interval
    # @return [Integer]
    attr_reader :db_pool_size
    # @return [Hash] options for each peer's Weft::CircuitBreaker (open_for:, ramp_for:, minimum_calls:,
    #   window_seconds:, failing_for:)
    attr_reader :breaker
    # @return [(String, Integer), nil] host and first port for peers over TCP
    attr_reader :peer_address

    # @param env [Hash] the environment
    # @return [Settings]
    def self.from_env(env = ENV)
      new(
        database_url: env["DATABASE_URL"],
        socket_dir: env.fetch("RINGPOOL_SOCKET_DIR", File.join(Dir.tmpdir, "ringpool")),
        peer_address: env["RINGPOOL_PEER_ADDRESS"],
        deadline: number(env, "RINGPOOL_DEADLINE_MS", 50) / 1000.0,
        ownership_interval: number(env, "RINGPOOL_OWNERSHIP_INTERVAL", 1),
        db_pool_size: Integer(env.fetch("RINGPOOL_DB_POOL", "8"), exception: false) || raise(ArgumentError, "RINGPOOL_DB_POOL must be an integer"),
        breaker: {
          open_for: number(env, "RINGPOOL_BREAKER_OPEN_FOR", 5),
          ramp_for: number(env, "RINGPOOL_BREAKER_RAMP_FOR", 6),
          minimum_calls: Integer(env.fetch("RINGPOOL_BREAKER_MINIMUM_CALLS", "20"), exception: false) ||
            raise(ArgumentError, "RINGPOOL_BREAKER_MINIMUM_CALLS must be an integer"),
          window_seconds: number(env, "RINGPOOL_BREAKER_WINDOW", 3),
          failing_for: number(env, "RINGPOOL_BREAKER_FAILING_FOR", 1.5)
        }
      )
    end

    def self.number(env, name, default)
      Float(env.fetch(name, default.to_s))
    rescue ArgumentError
      raise ArgumentError, "#{name} must be a number, not #{env[name].inspect}"
    end
    private_class_method :number

    # @raise [ArgumentError] for a missing database URL or a bad value (the breaker options are
    #   checked by building a breaker with them)
    def initialize(database_url:, socket_dir: File.join(Dir.tmpdir, "ringpool"), peer_address: nil, deadline: 0.05,
                   ownership_interval: 1.0, db_pool_size: 8, breaker: {})
      raise ArgumentError, "DATABASE_URL (database_url) is required" if database_url.nil? || database_url.empty?
      raise ArgumentError, "deadline must be a positive number of seconds" unless positive?(deadline)
      raise ArgumentError, "ownership_interval must be a positive number of seconds" unless positive?(ownership_interval)
      raise ArgumentError, "db_pool_size must be an integer of at least 1" unless db_pool_size.is_a?(Integer) && db_pool_size >= 1
      @database_url = database_url
      @socket_dir = socket_dir
      @peer_address = peer_address && parse_address(peer_address)
      @deadline = deadline.to_f
      @ownership_interval = ownership_interval.to_f
      @db_pool_size = db_pool_size
      Weft::CircuitBreaker.new("ringpool settings check", register: false, **breaker)
      @breaker = breaker.dup.freeze
      freeze
    end

    # The URL shard `index` serves its peers at, which is also its identity among the shards:
    # its unix socket, or with a peer address, http://host:(port + index).
    # @param index [Integer]
    # @return [String]
    def shard_url(index)
      return "unix://#{File.join(@socket_dir, "shard-#{index}.sock")}" unless @peer_address
      host, port = @peer_address
      "http://#{host.include?(':') ? "[#{host}]" : host}:#{port + index}"
    end

    # Where the shards keep their catalog snapshot (Catalog): in the socket folder, named after
    # the database URL, so that shards of another database sharing the folder keep theirs apart;
    # after the URL less its password, because anyone who may list the folder reads the name,
    # and a hash of a password is a dictionary attack away from it.
    # @return [String]
    def catalog_snapshot
      File.join(@socket_dir, "catalog-#{Digest::SHA256.hexdigest(database_without_password)[0, 16]}.json")
    end

    # Makes the socket folder if needed (for this user alone) and checks that nobody else may
    # write to it: the default is under /tmp, where another user could have made it first, then
    # put a socket of theirs in a shard's place (reading and answering its peers' calls) or
    # written the catalog snapshot. A folder of this user's or root's that others cannot write
    # to is accepted.
    # @return [String] the folder
    # @raise [ArgumentError] naming RINGPOOL_SOCKET_DIR when the folder is not safe
    def prepare_socket_dir
      FileUtils.mkdir_p(@socket_dir, mode: 0o700)
      stat = File.stat(@socket_dir)
      return @socket_dir if (stat.owned? || stat.uid.zero?) && !stat.world_writable?
      raise ArgumentError, "RINGPOOL_SOCKET_DIR #{@socket_dir} must belong to this user (or root) and not be writable " \
                           "by others (owner uid #{stat.uid}, mode #{format('%o', stat.mode & 0o7777)})"
    end

    # What the peer listener of the shard at `url` binds (a Weft server bind address).
    # @param url [String] from #shard_url
    # @return [String]
    def self.peer_bind(url)
      url.start_with?("http://") ? url.sub("http://", "tcp://") : url
    end

    private

    # The database URL, or key=value connection string, without its password.
    def database_without_password
      @database_url.sub(%r{\A([a-z][a-z0-9+.-]*://[^:@/]*):[^@/]*@}i, '\\1@')
                   .gsub(/\bpassword\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s&]*)/i, "password=")
    end

    def parse_address(text)
      host, port = text.to_s.match(/\A\[?([^\[\]]+?)\]?:(\d+)\z/)&.captures
      port = port&.to_i
      unless host && port&.between?(1, 65_535)
        raise ArgumentError, "RINGPOOL_PEER_ADDRESS (peer_address) must be host:port, not #{text.inspect}"
      end
      [host, port]
    end

    def positive?(value)
      value.is_a?(Numeric) && value.finite? && value.positive?
    end
  end
end
