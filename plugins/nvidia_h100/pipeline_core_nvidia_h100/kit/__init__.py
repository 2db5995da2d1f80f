"""The Hopper kit (issue 34): what every warp-specialized kernel family on the H100 shares.
``signature``: a kernel's parameters, rendered as its C parameter list and packed as its host
arguments from one list; ``call``: the PyTorch call layer (plugin host, build cache, tensor
maps, recipes, packed arguments, launch, custom ops).  Families import it through
``pipeline_core_nvidia_h100.kit_api``."""
