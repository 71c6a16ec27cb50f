"""runtime=torch_xla: its engine, its Lightning strategies (one device, SPMD, xla_mp, pod hosts) and the K-step program."""
