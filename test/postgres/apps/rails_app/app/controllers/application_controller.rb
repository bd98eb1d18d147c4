# frozen_string_literal: true

# The app's base controller.
class ApplicationController < ActionController::API
  rescue_from(ActiveRecord::RecordInvalid) { |error| render json: { errors: error.record.errors }, status: :unprocessable_entity }
  rescue_from(ActiveRecord::RecordNotFound) { render json: { errors: "not found" }, status: :not_found }
end
