# frozen_string_literal: true

# A post; its title is unique per author, which the validation checks with a query.
class Post < ApplicationRecord
  belongs_to :author

  validates :title, presence: true, uniqueness: { scope: :author_id }

  # The author's newest posts, newest first.
  scope :recent_by, ->(author, count) { where(author: author).order(id: :desc).limit(count) }
end
