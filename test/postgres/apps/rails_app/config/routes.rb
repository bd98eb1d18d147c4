# frozen_string_literal: true

Rails.application.routes.draw do
  resources :authors, only: [] do
    resources :posts, only: :create
  end
end
