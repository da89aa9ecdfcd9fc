collectd.test_host.cpu.42.percent.idle
