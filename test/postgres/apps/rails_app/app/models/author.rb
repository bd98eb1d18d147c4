# frozen_string_literal: true

# Someone who writes posts.
class Author < ApplicationRecord
  has_many :posts, dependent: :destroy

  validates :name, presence: true, uniqueness: true
end
