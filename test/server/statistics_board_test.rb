# frozen_string_literal: true

require_relative "../test_helper"
require "tmpdir"
require "weft/server"

# The board behind a cluster's /stats: during a hot restart the old master's worker 0 and the
# new master's worker 0 serve side by side, and during a phased restart a worker and its
# replacement; each is shown, labelled with its master generation. (Before, each pair wrote
# worker-0.json: /stats showed one or the other.)
class ServerStatisticsBoardTest < Minitest::Test
  Board = Weft::Server::Statistics::Board

  def test_workers_of_one_index_in_two_master_generations_are_both_shown_labelled
    Dir.mktmpdir do |root|
      [0, 1].each { |generation| FileUtils.mkdir_p(Board.directory(root, generation)) }
      old = Board.new(root, 0, master_generation: 0, pid: 11)
      new = Board.new(root, 0, master_generation: 1, pid: 12)
      sibling = Board.new(root, 1, master_generation: 1, pid: 13)
      new.publish(worker: 0, pid: 12, requests: 3)
      old.publish(worker: 0, pid: 11, requests: 7)
      sibling.publish(worker: 1, pid: 13, requests: 1)

      expected = [[0, 0, 11, 7], [1, 0, 12, 3], [1, 1, 13, 1]]
      [old, new, sibling].each do |board|
        assert_equal expected, board.read.map { |s| [s[:master_generation], s[:worker], s[:pid], s[:requests]] }
      end

      Board.remove_other_generations(root, 1)
      assert_equal [12, 13], new.read.map { |snapshot| snapshot[:pid] }
    end
  end

  # A phased restart's worker and its replacement: one index, one generation, two processes.
  # The master removes an exited worker's snapshot by its pid.
  def test_a_worker_and_its_replacement_are_both_shown_until_the_master_removes_one
    Dir.mktmpdir do |root|
      FileUtils.mkdir_p(Board.directory(root, 0))
      old = Board.new(root, 0, pid: 21)
      replacement = Board.new(root, 0, pid: 22)
      old.publish(worker: 0, pid: 21, started_at: "2026-12-07T20:00:00Z")
      replacement.publish(worker: 0, pid: 22, started_at: "2026-12-07T21:00:00Z")
      assert_equal [21, 22], replacement.read.map { |snapshot| snapshot[:pid] }

      Board.remove(root, 21)
      assert_equal [22], replacement.read.map { |snapshot| snapshot[:pid] }
    end
  end

  def test_prometheus_series_carry_the_master_generation_in_a_cluster
    assert_equal %(worker="0",pid="11",master_generation="2"),
                 Weft::Server::Statistics.worker_labels({ worker: 0, pid: 11, master_generation: 2 })
    # A single process has no board, and no master.
    assert_equal %(worker="",pid="11"), Weft::Server::Statistics.worker_labels({ worker: nil, pid: 11 })
  end
end
