/** The status page's style sheet (inline, under the response's CSP nonce). */
export const STYLE = `
*, *::before, *::after { box-sizing: border-box; }
:root { font: 14px/1.4 system-ui, sans-serif; color: #1d2430; background: #f5f6f8; }
body { margin: 0; overflow-wrap: anywhere; }
header { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: center; padding: 10px 20px; background: #1d2430; color: #fff; }
header h1 { font-size: 18px; margin: 0; }
#label { min-width: 0; max-width: 50vw; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.grow { flex: 1; }
.badge { padding: 2px 8px; border-radius: 10px; background: #3b4656; font-size: 12px; }
.badge.write { background: #a33; }
main { padding: 12px 20px; max-width: 1300px; }
section { background: #fff; border-radius: 6px; padding: 10px 14px; margin: 12px 0; box-shadow: 0 1px 2px #0001; }
h2 { font-size: 15px; margin: 4px 0 8px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; background: none; box-shadow: none; padding: 0; }
.card { flex: 1 1 8em; background: #fff; border-radius: 6px; padding: 10px 14px; box-shadow: 0 1px 2px #0001; }
.card .n { font-size: 24px; font-weight: 600; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; min-width: 720px; table-layout: fixed; font-size: 13px; }
th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid #e3e6ea; vertical-align: top; overflow-wrap: anywhere; }
th { color: #5b6574; font-weight: 500; }
col.c-key { width: 20%; } col.c-type { width: 11%; } col.c-when { width: 12.5em; } col.c-n { width: 5.5em; }
col.c-error { width: 18%; } col.c-act { width: 6em; } col.c-spec { width: 22%; }
body:not(.actions) .c-act, body:not(.actions) .act { display: none; }
td.act button { display: block; margin: 0 0 3px; }
td.key { font-family: ui-monospace, monospace; }
td.error { white-space: pre-wrap; }
pre { margin: 0; max-height: 6em; overflow: auto; font-size: 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
details.long > pre, details.long > div { max-height: 24em; overflow: auto; margin-top: 4px; padding: 4px; background: #f5f6f8; border-radius: 4px; }
details.long > summary { cursor: pointer; }
details.long[open] > summary > bdi { display: none; }
details.long > summary .more { color: #2f6fde; font-size: 12px; white-space: nowrap; }
bdi, .user { unicode-bidi: isolate; }
.esc { font-family: ui-monospace, monospace; font-size: 11px; color: #a33; background: #fbeaea; border-radius: 3px; padding: 0 1px; unicode-bidi: isolate; direction: ltr; }
.row { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 8px 0; }
.muted { color: #7a8494; font-size: 12px; }
.error { color: #a33; }
button { font: inherit; white-space: nowrap; overflow-wrap: normal; padding: 3px 10px; border: 1px solid #b9c0ca; border-radius: 4px; background: #fff; cursor: pointer; }
button:disabled { opacity: .4; cursor: default; }
button.danger { border-color: #a33; color: #a33; }
input { font: inherit; padding: 3px 6px; border: 1px solid #b9c0ca; border-radius: 4px; max-width: 100%; }
#prefix { width: 260px; }
dialog { max-width: min(40rem, calc(100vw - 2rem)); overflow-wrap: anywhere; }
dialog code { font-family: ui-monospace, monospace; background: #f5f6f8; padding: 0 3px; border-radius: 3px; }
.group { border-top: 1px solid #e3e6ea; padding: 6px 0; }
.group:first-child { border-top: 0; }
svg text { font-size: 10px; fill: #7a8494; }
`;
