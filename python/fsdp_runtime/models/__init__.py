"""PyTorch models with TorchTitan's module trees and parameter names (the runtime's reference model's)."""
