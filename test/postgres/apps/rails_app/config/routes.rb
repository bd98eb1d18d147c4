# frozen_string_literal: true

Rails.application.routes.draw do
  resources :authors, only: [] do
    resources :posts, only: :create
  end
  # The Rails the app runs on (the test checks it is its own bundle's: 7.1, 7.2 or 8.1).
  get "version", to: ->(_env) { [200, { "content-type" => "text/plain" }, [Rails.version]] }
end
