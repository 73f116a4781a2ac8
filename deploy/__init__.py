"""Deploy: variant specs, engine config renderers, capacity planning and the model recipe."""
