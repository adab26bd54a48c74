// The admin console's confirmation dialog (index.html's #confirm). The page loads this
// script before console.js, which asks through confirmDialog before every action.
"use strict";

// Resolves with false (cancelled), true, or {algorithm, options} when asked for an algorithm.
function confirmDialog({ title, text, ok, algorithm }) {
  const $ = (selector) => document.querySelector(selector);
  const dialog = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-text").textContent = text;
  $("#confirm-ok").textContent = ok;
  $("#algorithm-fields").hidden = !algorithm;
  $("#algorithm-error").textContent = "";
  if (algorithm) {
    $("#algorithm").value = algorithm.name;
    $("#algorithm-options").value = JSON.stringify(algorithm.options);
  }
  return new Promise((resolve) => {
    let answer = false;
    const okClick = () => {
      if (algorithm) {
        const name = $("#algorithm").value.trim();
        let options;
        try {
          options = JSON.parse($("#algorithm-options").value || "{}");
          if (typeof options !== "object" || options === null || Array.isArray(options)) throw new Error("not an object");
        } catch (e) {
          $("#algorithm-error").textContent = `The options must be a JSON object (${e.message}).`;
          return;
        }
        if (!name) {
          $("#algorithm-error").textContent = "Give an algorithm.";
          return;
        }
        answer = { algorithm: name, options };
      } else {
        answer = true;
      }
      dialog.close();
    };
    const cancelClick = () => dialog.close();
    $("#confirm-ok").addEventListener("click", okClick);
    $("#confirm-cancel").addEventListener("click", cancelClick);
    dialog.addEventListener("close", () => {
      $("#confirm-ok").removeEventListener("click", okClick);
      $("#confirm-cancel").removeEventListener("click", cancelClick);
      resolve(answer);
    }, { once: true });
    dialog.showModal();
    (algorithm ? $("#algorithm") : $("#confirm-cancel")).focus();
  });
}
