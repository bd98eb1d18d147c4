# frozen_string_literal: true

# The app of bench/server/spread.rb, three kinds of request:
#   /        "Hello World"
#   /sleep   waits 1 ms (sleep: the request's fiber parks, as on I/O)
#   /cpu     computes for 1 ms of this thread's CPU time without yielding
run lambda { |env|
  case env["PATH_INFO"]
  when "/sleep" then sleep 0.001
  when "/cpu"
    finish = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + 0.001
    nil while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < finish
  end
  [200, { "content-type" => "text/plain" }, ["Hello World"]]
}
