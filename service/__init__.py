"""The scheduler service: durable store, launchers, GPU discovery, and the
``SchedulerService`` that drives ``hived.core.engine`` with the wall clock."""
