servers.cloud.int.foo42

bla.protocol_counter.foo

tcpconns.42-remote.foo

servers.cloud.int.foo.bar.apps.events.meh

foo.bar.whatever-average

abLaH

bFoO
