# frozen_string_literal: true

# Posts, each by one author, with titles unique per author.
class CreatePosts < ActiveRecord::Migration[7.1]
  def change
    create_table :posts do |t|
      t.references :author, null: false, foreign_key: true
      t.string :title, null: false
      t.timestamps
    end
    add_index :posts, [:author_id, :title], unique: true
  end
end
