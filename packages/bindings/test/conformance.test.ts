import { bindingConformance } from '@duetime/bindings/conformance';
import { TARGETS } from './targets/index.js';

// The binding conformance group, run for every library this package binds.
for (const { target, module, exportName } of Object.values(TARGETS))
  bindingConformance(target, { module, exportName });
