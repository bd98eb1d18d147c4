# frozen_string_literal: true

# POST /authors/:author_id/posts (title=...): the request of issue #12's Rails proof. Five
# queries and a slow one: the author (1); in a transaction, the title's uniqueness check (2) and
# the insert (3); the author's recent posts with their author preloaded by `includes` (4, 5);
# then `pg_sleep(0.05)`.
class PostsController < ApplicationController
  RECENT = 5
  SLOW_QUERY_SECONDS = 0.05

  def create
    author = Author.find(params[:author_id])
    post = Post.transaction { author.posts.create!(title: params.require(:title)) }
    # strict_loading: reading post.author below raises unless `includes` preloaded it.
    recent = Post.recent_by(author, RECENT).includes(:author).strict_loading.to_a
    ApplicationRecord.slow_query(SLOW_QUERY_SECONDS)
    render json: { id: post.id, title: post.title, recent: recent.map { |each| [each.author.name, each.title] } },
           status: :created
  end
end
