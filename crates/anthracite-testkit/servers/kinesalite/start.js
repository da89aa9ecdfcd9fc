// Starts kinesalite on 127.0.0.1 only (its CLI binds every interface) with zero
// create/delete/update delays. Usage: node start.js PORT
'use strict';
const kinesalite = require('kinesalite');
const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node start.js PORT');
  process.exit(2);
}
const server = kinesalite({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 100 });
server.listen(port, '127.0.0.1', (err) => {
  if (err) { console.error(err); process.exit(1); }
  console.log('kinesalite listening on 127.0.0.1:' + port);
});
// Die with the test process: stdin closes when the parent goes away.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
