"""The Hopper kit (issue 34): what every warp-specialized kernel family of this plugin shares.

* :mod:`.frame`: the kernel frame (the mbarriers carved and initialised, the start barrier, the
  role split, ``setmaxnreg``, each role's persistent tile loop);
* :mod:`.rings`: a step's place on its ring (stage, parity) as C expressions;
* :mod:`.tiles`: the device tile loop a family's tile scheduler gives the frame;
* :mod:`.wgmma`: the wgmma wrappers (operands from shared memory, or A from registers);
* :mod:`.signature`: a kernel's parameters, rendered as its C parameter list and packed as its
  host arguments from one list;
* :mod:`.call`: the PyTorch call layer (plugin host, build cache, tensor maps, recipes, packed
  arguments, launch, custom ops with fake, autograd, ops of several kernels);
* :mod:`.autotune`: a family's candidates ranked on the agents timing model, the best few
  timed, the winner cached under the family's key (its sources, the kit and the headers
  hashed).

A family package imports them through ``kit_api`` only (tests/test_plugin_api_surface.py).
"""
