// A tiny, safe Markdown renderer for result.md: the text is HTML-escaped FIRST,
// then a few constructs become markup (headings, fenced and inline code, bold,
// italics, lists, quotes, http(s) links). Nothing the job wrote can become a tag
// or an attribute of its own; link targets must start with http:// or https://.
"use strict";
window.renderMarkdown = (function () {
  function esc(s) {
    return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }
  function inline(s) {  // s is already escaped
    const codes = [];
    s = s.replace(/`([^`]+)`/g, (_, c) => { codes.push(c); return "\u0000" + (codes.length - 1) + "\u0000"; });
    s = s.replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g,
      (_, text, url) => '<a href="' + url + '" rel="noopener noreferrer" target="_blank">' + text + "</a>");
    s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>").replace(/__([^_]+)__/g, "<strong>$1</strong>");
    s = s.replace(/(^|[\s(])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>").replace(/(^|[\s(])_([^_\s][^_]*)_/g, "$1<em>$2</em>");
    return s.replace(/\u0000(\d+)\u0000/g, (_, i) => "<code>" + codes[+i] + "</code>");
  }
  return function render(text) {
    const lines = esc(text.replace(/\r\n?/g, "\n")).split("\n");
    const out = [];
    let para = [], list = null, fence = null;
    const flush = () => {
      if (para.length) { out.push("<p>" + inline(para.join(" ")) + "</p>"); para = []; }
      if (list) { out.push("</" + list + ">"); list = null; }
    };
    for (const line of lines) {
      if (fence !== null) {
        if (/^```/.test(line)) { out.push("<pre><code>" + fence.join("\n") + "</code></pre>"); fence = null; }
        else fence.push(line);
        continue;
      }
      let m;
      if (/^```/.test(line)) { flush(); fence = []; }
      else if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) { flush(); const n = m[1].length; out.push("<h" + n + ">" + inline(m[2]) + "</h" + n + ">"); }
      else if ((m = /^\s*[-*+]\s+(.*)$/.exec(line)) || (m = /^\s*\d+[.)]\s+(.*)$/.exec(line))) {
        const kind = /^\s*\d/.test(line) ? "ol" : "ul";
        if (para.length) { out.push("<p>" + inline(para.join(" ")) + "</p>"); para = []; }
        if (list !== kind) { if (list) out.push("</" + list + ">"); out.push("<" + kind + ">"); list = kind; }
        out.push("<li>" + inline(m[1]) + "</li>");
      }
      else if ((m = /^&gt;\s?(.*)$/.exec(line))) { flush(); out.push("<blockquote>" + inline(m[1]) + "</blockquote>"); }
      else if (!line.trim()) flush();
      else { if (list) { out.push("</" + list + ">"); list = null; } para.push(line.trim()); }
    }
    if (fence !== null) out.push("<pre><code>" + fence.join("\n") + "</code></pre>");
    flush();
    return out.join("\n");
  };
})();
