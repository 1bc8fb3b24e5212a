//! A faithful local Fancy relay and a demo surface, for tests, the demo and dogfooding.
