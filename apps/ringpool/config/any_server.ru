# frozen_string_literal: true

# ringpool under a server that is not Weft (config/puma.rb, or `falcon serve -c` this file): each
# process claims the lowest free shard index (ShardSlot) and runs its shard in a Weft reactor
# thread (ReactorThread), to which the server's threads or fibers hand requests over. Under
# `weft serve` use config/weft.rb instead: there each request already is a task of the worker's
# reactor. Loaded in every worker process (no preloading), after the fork.
require_relative "../lib/ringpool"

settings = Ringpool::Settings.from_env
shard = Ringpool.shard = Ringpool::Shard.new(settings)
url = settings.shard_url(Ringpool::ShardSlot.claim(settings.prepare_socket_dir))
run Ringpool::ReactorThread.new(shard.api) { shard.run(url) }.start
