# frozen_string_literal: true

require "weft/http"

# The rounds of bench/http_client/concurrent.rb, which profile.rb measures one at a time: 1,000
# concurrent GETs through one client, each variant counting the connections it opens (the limit
# is a maximum; how many a client opens for a burst is a large part of a cold round's cost, as
# the upstream spawns a thread for each).
module ConcurrentRounds
  REQUESTS = 1_000

  module_function

  # One Weft::HTTP::Client kept for every round (its pool warm after the first).
  # @param opened [Hash] counts connections opened under :weft
  # @param options [Hash] more Weft::HTTP::Client options
  # @return [Proc] one round per call
  def weft_kept(url, limit, opened, **options)
    client = Weft::HTTP::Client.new(url, proxy: nil, limit: limit, **options)
    lambda do
      before = created(client)
      Weft.run do
        bodies = Weft.map(1..REQUESTS) { client.get("/").body }
        raise "wrong body" unless bodies.all? { |body| body.bytesize == 22 }
      end
      opened[:weft] += created(client) - before
    end
  end

  # A new Weft::HTTP::Client per round, closed after it (as async-http's must be, see below).
  # @param opened [Hash] counts connections opened under :weft_cold
  # @return [Proc]
  def weft_cold(url, limit, opened, **options)
    lambda do
      client = Weft::HTTP::Client.new(url, proxy: nil, limit: limit, **options)
      Weft.run { Weft.map(1..REQUESTS) { client.get("/").body } }
      opened[:weft_cold] += created(client)
      client.close
    end
  end

  # Async::HTTP::Client in Sync: bound to its reactor, so made (and closed) per round.
  # @param opened [Hash] counts connections opened under :async
  # @return [Proc]
  def async(url, limit, opened)
    require "async"
    require "async/barrier"
    require "async/http/client"
    require "async/http/endpoint"
    endpoint = Async::HTTP::Endpoint.parse(url)
    # Counted where async-http's pool makes its connections (Client#make_pool calls connect).
    endpoint.define_singleton_method(:connect) do |&block|
      opened[:async] += 1
      super(&block)
    end
    lambda do
      Sync do
        client = Async::HTTP::Client.new(endpoint, limit: limit)
        barrier = Async::Barrier.new
        sizes = []
        REQUESTS.times { barrier.async { sizes << client.get("/").read.bytesize } }
        barrier.wait
        raise "wrong body" unless sizes.size == REQUESTS && sizes.all?(22)
      ensure
        client&.close
      end
    end
  end

  def created(client)
    client.statistics.values.sum { |stats| stats[:created] }
  end
end
